const cfg = { a: { b: null }, list: [] };
console.log(cfg.a?.b?.c, cfg.x?.y, cfg.a.b ?? 'default', 0 ?? 1, cfg.list?.[0]?.name);
let n = null; n ??= 3; let m = 0; m ||= 4; console.log(n, m);
