const fs = require('fs');
const text = fs.readFileSync('/output/main.md', 'utf8');
console.log(text.split('\n')[0], text.length);
console.log(fs.existsSync('/output/main.md'), fs.existsSync('/output/none.md'));
console.log(fs.readdirSync('/output').includes('main.md'));
