setTimeout(() => console.log('timeout 0'), 0);
setTimeout(() => console.log('timeout 10'), 10);
Promise.resolve().then(() => console.log('microtask'));
queueMicrotask(() => console.log('queued'));
console.log('sync');
