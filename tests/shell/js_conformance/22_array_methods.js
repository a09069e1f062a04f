const a = [1, 2, 3, 4];
console.log(a.flatMap((x) => [x, x * 10]).join(','), a.at(-1), a.findLast((x) => x % 2));
console.log([[1, [2]], [3]].flat(Infinity), a.includes(3), Array.from({ length: 3 }, (_, i) => i * i));
console.log(a.some((x) => x > 3), a.every((x) => x > 0), a.indexOf(9));
