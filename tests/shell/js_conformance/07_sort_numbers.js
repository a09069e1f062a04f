console.log([10, 9, 1, 100].sort().join(','));
console.log([10, 9, 1, 100].sort((a, b) => a - b).join(','));
console.log(['pear', 'Apple', 'fig'].sort().join(','));
