// Preload for server-everything's Streamable HTTP mode, which binds all interfaces:
// make a bare listen(port) bind 127.0.0.1 only.
const net = require("node:net");
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if ((typeof a[0] === "number" || /^\d+$/.test(String(a[0]))) && typeof a[1] !== "string") {
    a.splice(1, 0, "127.0.0.1");
  }
  return orig.apply(this, a);
};
