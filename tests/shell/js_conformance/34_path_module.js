const path = require('path');
console.log(path.join('/output', 'notes', '..', 'main.md'), path.basename('/a/b/c.txt'), path.extname('x.tar.gz'));
console.log(path.dirname('/a/b/c.txt'), path.basename('/a/b/c.txt', '.txt'), path.isAbsolute('a/b'));
