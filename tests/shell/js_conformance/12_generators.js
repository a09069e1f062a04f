function* fib() { let [a, b] = [0, 1]; for (;;) { yield a; [a, b] = [b, a + b]; } }
const out = [];
for (const n of fib()) { if (n > 50) break; out.push(n); }
console.log(out.join(' '));
function* two() { const x = yield 1; console.log('got', x); return 'end'; }
const g = two();
console.log(g.next().value, JSON.stringify(g.next(42)));
