const name = 'Mira', hp = 7;
console.log(`${name} has ${hp * 2} hp
and a second line`);
const tag = (strings, ...vals) => strings.raw.map((s, i) => s + (vals[i] ?? '')).join('|');
console.log(tag`a${1}b${2}c`);
