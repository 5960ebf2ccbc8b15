// DevLoop's hollow build of a node unit's code/: node hollow.cjs FILE... rewrites each file
// in place (it runs in the sandbox, over a scratch copy of the unit). Every function,
// method, constructor and arrow gets a guard first: while a test body runs (the setup
// file sets globalThis.__devloop_in_test__ around each test's own function) it returns
// at once, answering 501 to any HTTP response it was handed; at import time and in hooks
// it runs as written. A .vue file's template becomes an empty <div>. Parsing runs nothing.
'use strict';
const fs = require('fs');
const { parse } = require(require.resolve('@babel/parser', { paths: [process.cwd()] }));

const GUARD = '__devloop_hollow__';
const PRELUDE =
  `function ${GUARD}(args) { if (!globalThis.__devloop_in_test__) return false; ` +
  `for (const a of args || []) if (a && typeof a.writeHead === 'function' && ` +
  `typeof a.end === 'function' && !a.headersSent) { a.statusCode = 501; a.end(); } ` +
  `return true; }\n`;
const FUNCTIONS = new Set([
  'FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression', 'ObjectMethod',
  'ClassMethod', 'ClassPrivateMethod',
]);

// What the guard is handed: `arguments`, or an arrow's own parameters (it has none).
function argsOf(fn, source) {
  if (fn.type !== 'ArrowFunctionExpression') return 'arguments';
  const names = [];
  for (const p of fn.params) {
    if (p.type === 'Identifier') names.push(p.name);
    else if (p.type === 'RestElement' && p.argument.type === 'Identifier') names.push('...' + p.argument.name);
    else if (p.type === 'AssignmentPattern' && p.left.type === 'Identifier') names.push(p.left.name);
  }
  return `[${names.join(', ')}]`;
}

function edits(ast, source) {
  const out = []; // [position, order, text]: applied from the end
  const walk = (node) => {
    if (!node || typeof node.type !== 'string') return;
    if (FUNCTIONS.has(node.type) && node.body) {
      const call = `${GUARD}(${argsOf(node, source)})`;
      if (node.body.type === 'BlockStatement') {
        out.push([node.body.start + 1, 0, ` if (${call}) return; `]);
      } else {
        // An expression body: `x => x * 2` becomes `x => (guard ? undefined : (x * 2))`.
        const span = node.body.end - node.body.start;
        out.push([node.body.start, -span, `(${call} ? undefined : (`]);
        out.push([node.body.end, span, '))']);
      }
    }
    for (const key of Object.keys(node)) {
      if (key === 'loc' || key === 'extra') continue;
      const value = node[key];
      if (Array.isArray(value)) value.forEach(walk);
      else if (value && typeof value.type === 'string') walk(value);
    }
  };
  walk(ast.program);
  return out;
}

function apply(source, list) {
  // Later positions first; at one position, inner closings before outer ones and outer
  // openings before inner ones (the order key does both).
  list.sort((a, b) => b[0] - a[0] || b[1] - a[1]);
  let text = source;
  for (const [at, , insert] of list) text = text.slice(0, at) + insert + text.slice(at);
  return text;
}

function hollowScript(source, ts) {
  const ast = parse(source, {
    sourceType: 'unambiguous', allowReturnOutsideFunction: true, errorRecovery: false,
    plugins: ts ? ['typescript', 'jsx'] : ['jsx'],
  });
  const list = edits(ast, source);
  // The prelude goes after the directives ('use strict') and a hashbang, before the rest.
  const { directives, interpreter } = ast.program;
  const first = directives.length ? directives[directives.length - 1].end : interpreter ? interpreter.end : 0;
  list.push([first, -Infinity, (first ? '\n' : '') + PRELUDE]);
  return apply(source, list);
}

function hollowVue(source) {
  let text = source.replace(/<template(\s[^>]*)?>[\s\S]*<\/template>/, '<template><div></div></template>');
  text = text.replace(/(<script\b([^>]*)>)([\s\S]*?)(<\/script>)/g, (all, open, attrs, inner, close) =>
    open + hollowScript(inner, /lang=["']ts/.test(attrs)) + close);
  return text;
}

let failed = 0;
for (const file of process.argv.slice(2)) {
  try {
    const source = fs.readFileSync(file, 'utf8');
    const out = file.endsWith('.vue') ? hollowVue(source) : hollowScript(source, /\.[cm]?tsx?$/.test(file));
    fs.writeFileSync(file, out);
  } catch (e) {
    failed += 1;
    console.log(`HOLLOW-ERROR ${file}: ${String(e && e.message || e).split('\n')[0]}`);
  }
}
process.exit(failed ? 1 : 0);
