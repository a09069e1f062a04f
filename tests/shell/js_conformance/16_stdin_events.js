let data = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { data += chunk; });
process.stdin.on('end', () => {
  const nums = data.split(/\s+/).filter(Boolean).map(Number);
  console.log('sum', nums.reduce((s, n) => s + n, 0));
});
