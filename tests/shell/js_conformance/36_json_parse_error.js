try { JSON.parse('{bad json'); } catch (e) { console.log(e instanceof SyntaxError, e.name); }
console.log(JSON.stringify({ d: new Date(0), u: undefined, n: null, s: new Set([1]) }));
