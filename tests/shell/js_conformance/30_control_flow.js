outer: for (let i = 0; i < 3; i++) {
  for (let j = 0; j < 3; j++) { if (j === 2) continue outer; if (i === 2) break outer; console.log(i, j); }
}
const kind = (x) => { switch (typeof x) { case 'number': return 'num'; case 'string': return 'str'; default: return 'other'; } };
console.log(kind(1), kind('a'), kind(null));
