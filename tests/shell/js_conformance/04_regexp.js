const re = /(?<word>[a-z]+)-(?<num>\d+)/g;
const text = 'abc-12 def-345 x-6';
for (const m of text.matchAll(re)) console.log(m.groups.word, Number(m.groups.num) * 2);
console.log('a1b22c333'.replace(/\d+/g, (d) => `[${d.length}]`));
console.log(/^hello$/i.test('HELLO'), 'x,y;;z'.split(/[,;]+/));
