const { a, b: { c = 5, ...restB } = {}, ...rest } = { a: 1, b: { d: 4, e: 6 }, f: 7 };
console.log(a, c, JSON.stringify(restB), JSON.stringify(rest));
const [x, , y = 9, ...zs] = [1, 2, undefined, 4, 5];
console.log(x, y, zs);
const swap = ([p, q]) => [q, p];
console.log(swap([1, 2]));
