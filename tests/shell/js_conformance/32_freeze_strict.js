'use strict';
const o = Object.freeze({ a: 1 });
try { o.a = 2; } catch (e) { console.log(e instanceof TypeError, o.a); }
console.log(Object.isFrozen(o));
