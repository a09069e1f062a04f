function f() {
  const log = [];
  try { log.push('try'); throw new Error('x'); }
  catch (e) { log.push('catch ' + e.message); return log; }
  finally { log.push('finally'); }
}
console.log(f().join(' > '));
