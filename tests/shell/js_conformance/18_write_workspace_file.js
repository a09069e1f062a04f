const fs = require('fs');
fs.writeFileSync('/scratch/js-out.txt', 'line one\n');
fs.appendFileSync('/scratch/js-out.txt', 'line two\n');
console.log(fs.readFileSync('/scratch/js-out.txt', 'utf8').trim().split('\n').length);
try { fs.writeFileSync('/skills/dice/x.txt', 'no'); } catch (e) { console.log('refused', e.code); }
try { fs.readFileSync('/scratch/missing.txt'); } catch (e) { console.log(e.code); }
