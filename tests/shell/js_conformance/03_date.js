const d = new Date(Date.UTC(2024, 0, 15, 10, 30));
console.log(d.toISOString());
console.log(d.getUTCDay(), d.getUTCFullYear(), d.getUTCMonth());
const later = new Date(d.getTime() + 36 * 3600 * 1000);
console.log(later.toISOString().slice(0, 10));
console.log(Date.parse('2024-03-01T12:00:00Z'));
