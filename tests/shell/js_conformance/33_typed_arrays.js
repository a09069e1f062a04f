const buf = new Uint8Array([1, 2, 255]);
console.log(buf.length, buf[2], Array.from(buf).reverse().join(','));
const f = new Float64Array(2); f[0] = 1.5; console.log(f[0] + f[1]);
