class Counter {
  #count = 0;
  static made = 0;
  constructor(start) { this.#count = start; Counter.made++; }
  get value() { return this.#count; }
  set value(v) { this.#count = Math.max(0, v); }
  inc() { this.#count++; return this; }
}
const c = new Counter(5).inc().inc();
c.value = -3;
console.log(c.value, new Counter(1).inc().value, Counter.made);
