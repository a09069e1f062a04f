const wait = (ms, v) => new Promise((r) => setTimeout(() => r(v), ms));
async function main() {
  const [a, b] = await Promise.all([wait(20, 'a'), wait(5, 'b')]);
  console.log(a, b);
  const first = await Promise.race([wait(30, 'slow'), wait(1, 'fast')]);
  console.log(first);
  try { await Promise.reject(new Error('nope')); } catch (e) { console.log('caught', e.message); }
}
main().then(() => console.log('done'));
