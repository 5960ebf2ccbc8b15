// DevLoop's verdict channel for vitest 3: one JSON line per event, written to the fd the
// worker passed in VERDICT_FD, as each test finishes. It runs in vitest's main process
// (tests run in forked workers); it is bound read-only, never written by the sandbox.
import { writeSync } from 'node:fs';

const fd = Number(process.env.VERDICT_FD);
const STATES = { pass: 'passed', fail: 'failed', skip: 'skipped', todo: 'skipped' };

function send(record) {
  if (!Number.isInteger(fd) || fd < 3) return;
  const line = Buffer.from(JSON.stringify(record) + '\n');
  for (let at = 0; at < line.length; ) at += writeSync(fd, line, at);
}

// The name vitest's JSON reporter gives a test: its suites' names and its own, joined.
function fullName(task) {
  const names = [];
  for (let suite = task.suite; suite; suite = suite.suite) names.unshift(suite.name);
  return (task.name ? [...names, task.name] : names).join(' ');
}

export default class VerdictReporter {
  onTestModuleCollected(module) {
    send({ e: 'collected', module: module.moduleId, n: [...module.children.allTests()].length });
  }

  onTestCaseResult(test) {
    const task = test.task;
    const outcome = STATES[task.result?.state || task.mode] || 'skipped';
    send({ e: 'test', id: task.id, module: test.module.moduleId, name: fullName(task), outcome });
  }

  onTestModuleEnd(module) {
    send({ e: 'module', module: module.moduleId, errors: module.errors().length });
  }

  onTestRunEnd(modules, unhandled, reason) {
    send({ e: 'end', reason, modules: modules.length, unhandled: unhandled.length });
  }
}
