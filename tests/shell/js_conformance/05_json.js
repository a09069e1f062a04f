const obj = { name: 'Aria', tags: ['elf', 'bard'], level: 3 };
const text = JSON.stringify(obj, null, 2);
console.log(text);
const back = JSON.parse(text, (k, v) => (k === 'level' ? v + 1 : v));
console.log(back.level, back.tags.length);
