class Range {
  constructor(a, b) { this.a = a; this.b = b; }
  *[Symbol.iterator]() { for (let i = this.a; i < this.b; i++) yield i; }
}
console.log([...new Range(2, 6)], Math.min(...new Range(4, 8)));
const it = new Range(0, 2)[Symbol.iterator]();
console.log(JSON.stringify([it.next(), it.next(), it.next()]));
