console.log({ a: 1, b: 'two', c: [1, 2], d: { e: null } });
console.log([1, 'x', true], new Map([['k', 1]]), new Set(['s']));
console.log('%s is %d years', 'Ann', 42.9);
console.error('to stderr');
