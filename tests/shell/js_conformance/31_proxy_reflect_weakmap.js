const seen = [];
const p = new Proxy({ a: 1 }, { get: (t, k) => { seen.push(k); return Reflect.get(t, k) ?? 'none'; } });
console.log(p.a, p.b, seen.join(','));
const wm = new WeakMap(); const key = {}; wm.set(key, 'v'); console.log(wm.get(key), wm.has({}));
