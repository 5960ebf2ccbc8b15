// DevLoop's verdict channel for vitest 3: one JSON line per event, written to the fd the
// worker passed in VERDICT_FD, as each test finishes. It runs in vitest's main process
// (tests run in forked workers); it is bound read-only, never written by the sandbox.
// A worker whose guard (vitest_guard.mjs) saw the code change the framework marks the
// test's meta; any mark, and any change to this reporter, becomes a `tamper` record.
// Beside the verdict it sends detail (never the verdict): each failed test's errors as
// vitest holds them (message, stack, expected, actual, diff), and the errors of suites
// whose beforeAll/afterAll hooks failed, which the JSON report leaves out.
import { writeSync } from 'node:fs';

const fd = Number(process.env.VERDICT_FD);
const STATES = { pass: 'passed', fail: 'failed', skip: 'skipped', todo: 'todo' };
const MARK = 'devloopTamper';
const stringify = JSON.stringify;
const FIELD_CAP = 8000; // characters of one field of an error; its full length is sent too
const ERRORS_CAP = 3; // errors sent per test or suite
let budget = 2_000_000; // characters of detail per run: the channel holds 8 MB in all

function send(record) {
  if (!Number.isInteger(fd) || fd < 3) return;
  const line = Buffer.from(stringify(record) + '\n');
  for (let at = 0; at < line.length; ) at += writeSync(fd, line, at);
}

// The name vitest's JSON reporter gives a test: its suites' names and its own, joined.
function fullName(task) {
  const names = [];
  for (let suite = task.suite; suite; suite = suite.suite) names.unshift(suite.name);
  return (task.name ? [...names, task.name] : names).join(' ');
}

// One error as plain fields, each capped; `<field>Length` is its length before the cap.
function errorFields(error) {
  const out = {};
  for (const key of ['name', 'message', 'stack', 'expected', 'actual', 'diff']) {
    const value = error?.[key];
    if (typeof value !== 'string') continue;
    out[key] = value.slice(0, FIELD_CAP);
    if (value.length > FIELD_CAP) out[`${key}Length`] = value.length;
  }
  return out;
}

// The first errors of a test or suite, within what is left of the run's detail budget.
function errorList(errors) {
  const out = [];
  for (const error of (errors || []).slice(0, ERRORS_CAP)) {
    const fields = errorFields(error);
    const size = stringify(fields).length;
    if (size > budget) break;
    budget -= size;
    out.push(fields);
  }
  return out;
}

// The hooks vitest marked as started and never as passed: the ones that threw.
function failedHooks(task) {
  const hooks = task.result?.hooks || {};
  return Object.keys(hooks).filter((name) => hooks[name] !== 'pass');
}

const seen = new Set();
function tamper(what) {
  if (typeof what !== 'string' || !what || seen.has(what)) return;
  seen.add(what);
  send({ e: 'tamper', what: what.slice(0, 300) });
}

export default class VerdictReporter {
  constructor() {
    const proto = Object.getPrototypeOf(this);
    this.methods = Object.getOwnPropertyNames(proto).map((name) => [name, proto[name]]);
  }

  // This reporter's own methods and what it writes with, as they were when it started.
  intact() {
    const proto = Object.getPrototypeOf(this);
    for (const [name, fn] of this.methods) if (proto[name] !== fn) tamper(`reporter.${name}`);
  }

  onTaskUpdate(packs) {
    for (const [, , meta] of packs || []) tamper(meta?.[MARK]);
  }

  onTestModuleCollected(module) {
    this.intact();
    send({ e: 'collected', module: module.moduleId, n: [...module.children.allTests()].length });
  }

  onTestCaseResult(test) {
    this.intact();
    const task = test.task;
    tamper(task.meta?.[MARK]);
    // test.todo is written down, not run: recorded as todo, whatever state vitest gives it.
    const outcome = task.mode === 'todo' ? 'todo' : STATES[task.result?.state || task.mode] || 'skipped';
    if (outcome === 'failed') {
      const errors = errorList(test.result().errors);
      send({ e: 'errors', id: task.id, module: test.module.moduleId, name: test.fullName, errors });
    }
    send({ e: 'test', id: task.id, module: test.module.moduleId, name: fullName(task), outcome });
  }

  onTestModuleEnd(module) {
    this.intact();
    tamper(module.task.meta?.[MARK]);
    // Suites (and the file itself) that failed outside their tests: a hook threw.
    for (const suite of [module, ...module.children.allSuites()]) {
      if (!suite.errors().length) continue;
      const name = suite.type === 'module' ? '' : suite.fullName;
      const errors = errorList(suite.errors());
      send({ e: 'hook', module: module.moduleId, suite: name, hooks: failedHooks(suite.task), errors });
    }
    send({ e: 'module', module: module.moduleId, errors: module.errors().length });
  }

  onTestRunEnd(modules, unhandled, reason) {
    this.intact();
    for (const module of modules) tamper(module.task.meta?.[MARK]);
    send({ e: 'end', reason, modules: modules.length, unhandled: unhandled.length });
  }
}
