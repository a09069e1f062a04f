console.log('7'.padStart(3, '0'), 'a-b-c'.replaceAll('-', '+'), 'x,y,z'.split(',', 2));
console.log('  trim  '.trim() + '|', 'abc'.at(-1), 'Straße'.toUpperCase(), 'ab'.repeat(3));
console.log('héllo'.normalize('NFD').length, [...'héllo'].length, 'abc'.codePointAt(1));
