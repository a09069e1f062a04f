const m = new Map([['b', 2], ['a', 1]]);
m.set('c', 3);
console.log(m.size, m.get('a'), m.has('z'));
for (const [k, v] of m) console.log(k, v);
console.log([...m.keys()].join(','));
