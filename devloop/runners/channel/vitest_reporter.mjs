// DevLoop's verdict channel for vitest 3: one JSON line per event, written to the fd the
// worker passed in VERDICT_FD, as each test finishes. It runs in vitest's main process
// (tests run in forked workers); it is bound read-only, never written by the sandbox.
// A worker whose guard (vitest_guard.mjs) saw the code change the framework marks the
// test's meta; any mark, and any change to this reporter, becomes a `tamper` record.
import { writeSync } from 'node:fs';

const fd = Number(process.env.VERDICT_FD);
const STATES = { pass: 'passed', fail: 'failed', skip: 'skipped', todo: 'todo' };
const MARK = 'devloopTamper';
const stringify = JSON.stringify;

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
    send({ e: 'test', id: task.id, module: test.module.moduleId, name: fullName(task), outcome });
  }

  onTestModuleEnd(module) {
    this.intact();
    tamper(module.task.meta?.[MARK]);
    send({ e: 'module', module: module.moduleId, errors: module.errors().length });
  }

  onTestRunEnd(modules, unhandled, reason) {
    this.intact();
    for (const module of modules) tamper(module.task.meta?.[MARK]);
    send({ e: 'end', reason, modules: modules.length, unhandled: unhandled.length });
  }
}
