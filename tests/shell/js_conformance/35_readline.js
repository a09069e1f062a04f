const readline = require('readline');
const rl = readline.createInterface({ input: process.stdin });
const rows = [];
rl.on('line', (line) => rows.push(line.split(',')));
rl.on('close', () => console.log(rows.length, rows.map((r) => r[1]).join(' ')));
