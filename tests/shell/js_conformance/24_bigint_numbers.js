console.log((2n ** 64n).toString(), typeof 1n, 10n / 3n);
console.log((3.14159).toFixed(2), parseInt('42px'), parseFloat('3.5e2'), Number.isInteger(5.0));
console.log(Math.max(...[3, 9, 2]), 0.1 + 0.2 === 0.3, Number('x'), (255).toString(16));
