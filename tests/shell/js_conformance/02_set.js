const s = new Set([3, 1, 3, 2, 1]);
console.log(s.size, s.has(2));
s.delete(1);
console.log([...s].join(' '));
