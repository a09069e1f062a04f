class NotFound extends Error {
  constructor(what) { super(`${what} not found`); this.name = 'NotFound'; }
}
try { throw new NotFound('sword'); } catch (e) {
  console.log(e instanceof NotFound, e instanceof Error, e.name, e.message);
}
try { null.x; } catch (e) { console.log(e instanceof TypeError); }
