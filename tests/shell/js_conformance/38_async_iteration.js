async function* ticks(n) { for (let i = 0; i < n; i++) { await null; yield i; } }
(async () => {
  const got = [];
  for await (const t of ticks(4)) got.push(t);
  console.log(got.join('-'));
  const results = await Promise.allSettled([Promise.resolve(1), Promise.reject(new Error('bad'))]);
  console.log(results.map((r) => r.status).join(','));
})();
