// DevLoop's tamper guard for vitest 3: the first setup file of every test worker, run
// before the test file imports the code under test. It snapshots what the worker's
// results pass through (expect and its matchers, vitest's globals and worker state, the
// built-ins they call) and compares after every test and at the end of the file. On a
// change it puts things back and tells the main process over the worker's own rpc
// channel, captured now (the reporter turns that into a `tamper` record), and fails the
// test. It is bound read-only; it imports nothing (it is loaded from outside the unit).
const MARK = 'devloopTamper';
const TAMPERED = 'the code under test changed the test framework';
const worker = globalThis.__vitest_worker__;
const send = worker?.rpc?.onTaskUpdate; // bound to the real channel to the main process
const GLOBALS = [
  'expect', 'vi', 'vitest', 'chai', 'assert', 'describe', 'suite', 'it', 'test', 'bench',
  'beforeEach', 'afterEach', 'beforeAll', 'afterAll', 'onTestFailed', 'onTestFinished',
  '__vitest_worker__', '__vitest_index__',
];

// [label, object, key] for every binding on the results' way.
function bindings() {
  const out = [];
  const own = (label, object) => {
    if (object == null) return;
    for (const key of Reflect.ownKeys(object)) out.push([`${label}.${String(key)}`, object, key]);
  };
  for (const key of GLOBALS) out.push([`globalThis.${key}`, globalThis, key]);
  for (const key of Reflect.ownKeys(globalThis)) {
    if (typeof key === 'symbol') out.push([`globalThis[${String(key)}]`, globalThis, key]);
  }
  const expect = globalThis.expect;
  own('expect', expect);
  if (typeof expect === 'function') own('expect(…)', Object.getPrototypeOf(expect(0)));
  const matchers = globalThis[Symbol.for('$$jest-matchers-object')];
  own('matchers', matchers);
  own('matchers.matchers', matchers?.matchers);
  if (worker) out.push(['__vitest_worker__.rpc', worker, 'rpc']); // the rest is its state
  for (const [label, object] of [
    ['Object', Object], ['Object.prototype', Object.prototype], ['Function.prototype',
    Function.prototype], ['Promise', Promise], ['Promise.prototype', Promise.prototype],
    ['Array.prototype', Array.prototype], ['Error', Error], ['Error.prototype',
    Error.prototype], ['JSON', JSON], ['Reflect', Reflect],
  ]) own(label, object);
  return out;
}

const describe = (object, key) => {
  const d = Object.getOwnPropertyDescriptor(object, key);
  return d && [d.value, d.get, d.set];
};
const snapshot = bindings().map(([label, object, key]) => [label, object, key,
  Object.getOwnPropertyDescriptor(object, key), describe(object, key)]);

function changed() {
  const found = [];
  for (const [label, object, key, saved, was] of snapshot) {
    const now = describe(object, key);
    if (was === undefined && now === undefined) continue;
    if (was === undefined || now === undefined || now.some((v, i) => v !== was[i])) {
      found.push(label);
      try {
        if (saved) Object.defineProperty(object, key, saved); // put it back for what follows
      } catch {}
    }
  }
  return found;
}

function report(task, found) {
  const what = found.slice(0, 5).join(', ');
  task.meta[MARK] = what;
  try {
    send?.([[task.id, task.result, { ...task.meta }]], []);
  } catch {}
  return `${TAMPERED}: ${what}`;
}

const { afterEach, afterAll } = globalThis;
afterEach(({ task }) => {
  const found = changed();
  if (found.length) throw new Error(report(task, found));
});
afterAll((suite) => {
  const found = changed();
  if (found.length) report(suite, found);
});
