console.log('start');
function explode() { throw new RangeError('too far'); }
explode();
console.log('never');
