console.log('before exit');
process.exitCode = 0;
process.exit(3);
console.log('never');
