setTimeout(() => { console.log('in timer'); process.exit(5); }, 5);
setTimeout(() => console.log('never'), 50);
console.log('start');
