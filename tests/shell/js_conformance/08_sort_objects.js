const people = [
  { n: 'Cid', age: 30 }, { n: 'Ann', age: 25 }, { n: 'Bob', age: 30 }, { n: 'Dee', age: 25 },
];
people.sort((a, b) => a.age - b.age);
console.log(people.map((p) => p.n).join(' '));
console.log(['b', 'a', 'c'].sort((x, y) => y.localeCompare(x)).join(''));
