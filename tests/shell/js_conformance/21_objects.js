const o = { b: 2, a: 1 };
const copy = { ...o, c: 3 };
console.log(Object.entries(copy).map(([k, v]) => `${k}=${v}`).join('&'));
console.log(JSON.stringify(Object.fromEntries([['x', 1], ['y', 2]])));
console.log(Object.keys(o).sort(), Object.values(o).reduce((s, v) => s + v));
