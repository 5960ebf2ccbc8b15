"""Code under test that reaches into the test framework: found in code/'s source, statically.

A unit's code is there to be tested, never to change how it is tested. `findings` reads
each file of code/ (python with the `ast` module, node with regexes over the source with
its comments blanked) and names every place that imports the test
framework or its internals, writes the module table, exits the process or hooks its exit,
installs trace hooks or import hooks, patches builtins, reaches objects it was not handed
(gc, frames, `__subclasses__`), or touches the verdict channel. A run whose code has a
finding is not run: it is `crashed` with `REFUSED` and the file, line and fix, and goes
to the coder. What the source cannot show (a name built at run time) is left to the
runtime check in the plugin and the reporter, which reports `TAMPERED`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

REFUSED = "the code under test reaches into the test framework"
TAMPERED = "the code under test changed the test framework"
# A run refused because code/ imports of other units what is not there (devloop.upstream).
UPSTREAM = "the code imports what its dependencies do not provide"
# A run killed at its limit while its innermost frame was in code/ (timing.killed_reason).
LOOP_IN_CODE = "a test never finished because the code under test did not return"
# A run that crashed while loading the tests with its innermost frame in code/ (an
# ImportError in the unit's module, an exception its import raised): the coder's.
RAISED_IN_CODE = "the code under test raised while the tests loaded it"
PY_SUFFIXES = (".py",)
NODE_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx", ".vue")


@dataclass(frozen=True)
class Finding:
    """One place in code/ that reaches into the test framework, and what to do instead."""

    path: str  # relative to the unit dir: code/x.py
    line: int
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}; {self.fix}"


def is_code_fault(reason: str | None) -> bool:
    """Whether a crash is the code's doing (a static refusal, a runtime catch, an import
    of another unit that is not there, an error raised in code/ as the tests loaded it):
    the coder's to fix, never the tester's."""
    return bool(reason) and str(reason).startswith(
        (REFUSED, TAMPERED, UPSTREAM, LOOP_IN_CODE, RAISED_IN_CODE)
    )


def crash_reason(found: list[Finding], limit: int = 3) -> str:
    """The crash reason of a refused run: the first findings, each with its fix."""
    more = f" (and {len(found) - limit} more)" if len(found) > limit else ""
    return f"{REFUSED}: " + " | ".join(map(str, found[:limit])) + more


def findings(files: dict[str, str]) -> list[Finding]:
    """Every finding in code/ (unit-relative path -> source), in path and line order."""
    out: list[Finding] = []
    for path in sorted(files):
        if path.endswith(PY_SUFFIXES):
            out += python_findings(path, files[path])
        elif path.endswith(NODE_SUFFIXES):
            out += node_findings(path, files[path])
    return out


# --- python -----------------------------------------------------------------------------

_NO_FRAMEWORK = "code/ must not import or reach the test framework: the tests call your code"
# Modules whose import alone means code/ is reaching for the framework or the process.
_PY_MODULES = {
    "pytest": _NO_FRAMEWORK,
    "_pytest": _NO_FRAMEWORK,
    "pluggy": _NO_FRAMEWORK,
    "unittest": _NO_FRAMEWORK,
    "atexit": "do not run code at interpreter exit: do the work when your function is called",
    "faulthandler": "do not install fault handlers: let errors reach the tests",
    "builtins": "do not touch builtins: define your own names in your module",
    "ctypes": "do not write process memory: write plain python",
    "_ctypes": "do not write process memory: write plain python",
    "cffi": "do not write process memory: write plain python",
    "gc": None,  # only some calls (below); gc.collect() is fine
    "signal": None,
    "inspect": None,
}
# module.attribute calls or references, and what to do instead.
_EXIT_FIX = "raise an exception (or return an error value) instead of ending the process"
_REACH_FIX = "use only the objects your function is given"
_PY_ATTRS = {
    ("os", "_exit"): _EXIT_FIX,
    ("os", "abort"): _EXIT_FIX,
    ("os", "kill"): _EXIT_FIX,
    ("os", "killpg"): _EXIT_FIX,
    ("os", "dup2"): "do not redirect the process's file descriptors",
    ("os", "closerange"): "do not close the process's file descriptors",
    ("sys", "exit"): _EXIT_FIX,
    ("sys", "modules"): "do not read or write the module table: import what you need",
    ("sys", "meta_path"): "do not install import hooks: import what you need",
    ("sys", "path_hooks"): "do not install import hooks: import what you need",
    ("sys", "path_importer_cache"): "do not install import hooks: import what you need",
    ("sys", "settrace"): "do not install trace hooks",
    ("sys", "setprofile"): "do not install profile hooks",
    ("sys", "monitoring"): "do not install trace hooks",
    ("sys", "addaudithook"): "do not install audit hooks",
    ("sys", "_getframe"): _REACH_FIX,
    ("sys", "_current_frames"): _REACH_FIX,
    ("sys", "excepthook"): "let exceptions reach the tests",
    ("sys", "unraisablehook"): "let exceptions reach the tests",
    ("threading", "settrace"): "do not install trace hooks",
    ("threading", "setprofile"): "do not install profile hooks",
    ("threading", "settrace_all_threads"): "do not install trace hooks",
    ("threading", "setprofile_all_threads"): "do not install profile hooks",
    ("threading", "excepthook"): "let exceptions reach the tests",
    ("gc", "get_objects"): _REACH_FIX,
    ("gc", "get_referrers"): _REACH_FIX,
    ("gc", "get_referents"): _REACH_FIX,
    ("signal", "signal"): "do not install signal handlers",
    ("signal", "alarm"): "do not schedule signals",
    ("signal", "setitimer"): "do not schedule signals",
    ("signal", "pthread_kill"): _EXIT_FIX,
    ("signal", "raise_signal"): _EXIT_FIX,
    ("inspect", "currentframe"): _REACH_FIX,
    ("inspect", "stack"): _REACH_FIX,
    ("inspect", "getouterframes"): _REACH_FIX,
}
# Attributes that walk from an object to what it was not handed (frames, globals, classes).
_PY_DUNDERS = {
    "__subclasses__", "__globals__", "__code__", "__closure__", "__builtins__",
    "f_back", "f_globals", "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
}
# Names only the framework defines: reports, hook functions, its plugin manager.
_PY_NAMES = {
    "TestReport", "CollectReport", "CallInfo", "pluginmanager", "pytest_plugins",
    "_pytest", "__import__",
}
_PY_STRINGS = re.compile(r"^(?:_?pytest|pluggy|unittest)(?:\.|$)|VERDICT_FD|PYTEST_|^/proc/")
_MAIN_GUARD = "__main__"
_STATE_FIX = "do not change the interpreter's state"


def python_findings(path: str, source: str) -> list[Finding]:
    """The findings in one python file (a file that does not parse has none: the syntax
    check reports it)."""
    try:
        tree = ast.parse(source, path)
    except (SyntaxError, ValueError):
        return []
    return _PyScan(path, tree).run()


class _PyScan:
    """One walk over a module's tree, resolving `import x as y` aliases."""

    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path, self.tree = path, tree
        self.found: dict[tuple[int, str], Finding] = {}
        self.aliases: dict[str, str] = {}  # local name -> module (or module.attr)
        self.guarded = _main_guarded(tree)
        self.calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}

    def add(self, node: ast.AST, what: str, fix: str) -> None:
        line = getattr(node, "lineno", 1)
        self.found.setdefault((line, what), Finding(self.path, line, what, fix))

    def run(self) -> list[Finding]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
                    self.module(node, alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                self.module(node, node.module)
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    self.attribute(node, node.module, alias.name, imported=True)
        for node in ast.walk(self.tree):
            self.visit(node)
        return sorted(self.found.values(), key=lambda f: (f.line, f.what))

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute):
            if node.attr in _PY_DUNDERS:
                self.add(node, f"uses .{node.attr}", _REACH_FIX)
            elif node.attr in _PY_NAMES:
                self.add(node, f"uses .{node.attr}", _NO_FRAMEWORK)
            elif isinstance(node.value, ast.Name):
                base = self.aliases.get(node.value.id, node.value.id)
                self.attribute(node, base, node.attr)
                if base == "sys" and isinstance(node.ctx, ast.Store | ast.Del):
                    self.add(node, f"assigns sys.{node.attr}", _STATE_FIX)
        elif isinstance(node, ast.Name):
            self.name(node)
        elif isinstance(node, ast.Raise) and id(node) not in self.guarded:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                self.add(node, "raises SystemExit", _EXIT_FIX)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("pytest_"):
                self.add(node, f"defines the pytest hook {node.name}", _NO_FRAMEWORK)
        elif isinstance(node, ast.Call):
            self.call(node)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and len(node.value) < 200
            and _PY_STRINGS.search(node.value)
        ):
            self.add(node, f"names {node.value!r}", _NO_FRAMEWORK)

    def module(self, node: ast.AST, module: str) -> None:
        fix = _PY_MODULES.get(module.split(".")[0])
        if fix:
            self.add(node, f"imports {module}", fix)

    def attribute(self, node: ast.AST, base: str, attr: str, imported: bool = False) -> None:
        fix = _PY_ATTRS.get((base, attr))
        exiting = (base, attr) == ("sys", "exit")
        if fix and not (exiting and id(node) in self.guarded):
            self.add(node, f"{'imports' if imported else 'uses'} {base}.{attr}", fix)

    def name(self, node: ast.Name) -> None:
        if node.id in _PY_NAMES:
            self.add(node, f"uses {node.id}", _NO_FRAMEWORK)
        elif node.id in ("exit", "quit") and id(node) in self.calls:
            if id(node) not in self.guarded and node.id not in self.aliases:
                self.add(node, f"calls {node.id}()", _EXIT_FIX)
        elif "." in self.aliases.get(node.id, ""):  # from os import _exit; _exit(0)
            base, _, attr = self.aliases[node.id].rpartition(".")
            self.attribute(node, base, attr)

    def call(self, node: ast.Call) -> None:
        """Dynamic imports, getattr and setattr, when their arguments are literal."""
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
        first = node.args[0] if node.args else None
        if name in ("import_module", "find_spec") and args and isinstance(args[0], str):
            self.module(node, args[0])
        if name in ("getattr", "setattr", "delattr", "hasattr") and len(args) > 1:
            attr = args[1]
            if isinstance(attr, str) and attr in _PY_DUNDERS:
                self.add(node, f"uses .{attr} through {name}()", _REACH_FIX)
            elif isinstance(attr, str) and isinstance(first, ast.Name):
                self.attribute(node, self.aliases.get(first.id, first.id), attr)
        if name in ("setattr", "delattr") and isinstance(first, ast.Name):
            target = self.aliases.get(first.id, first.id)
            if target in ("sys", "builtins", "os", "threading", "gc"):
                self.add(node, f"calls {name}({target}, ...)", _STATE_FIX)


def _main_guarded(tree: ast.Module) -> set[int]:
    """The nodes under `if __name__ == "__main__":`: a script may exit there."""
    out: set[int] = set()
    for stmt in tree.body:
        if not isinstance(stmt, ast.If):
            continue
        test = stmt.test
        if isinstance(test, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value == _MAIN_GUARD
            for c in [test.left, *test.comparators]
        ):
            out |= {id(n) for body in stmt.body for n in ast.walk(body)}
    return out


# --- node -------------------------------------------------------------------------------

_NODE_FIX = "code/ must not import or reach vitest: the tests call your code"
_NODE_EXIT_FIX = "throw an Error (or return an error value) instead of ending the process"
_TEST_GLOBALS = (
    "expect|vi|vitest|chai|describe|suite|it|test|bench|beforeEach|afterEach|beforeAll|"
    "afterAll|onTestFailed|onTestFinished|__vitest_\\w+"
)
_FRAMEWORK_MODULES = (
    r"(?:vitest|vite|vite-node|@vitest|@vitejs|tinypool|tinyspy|birpc|chai|@jest|jest|"
    r"node:inspector|inspector|node:v8|v8|node:worker_threads|worker_threads)(?:/[^'\"`]*)?"
)
# (pattern, what, fix, whether it looks inside strings)
_NODE_RULES: list[tuple[re.Pattern[str], str, str, bool]] = [
    (re.compile(rf"""\b(?:require|import)\s*\(\s*(['"`]){_FRAMEWORK_MODULES}\1"""),
     "imports the test framework", _NODE_FIX, True),
    (re.compile(rf"""\b(?:from|import)\s*(['"`]){_FRAMEWORK_MODULES}\1"""),
     "imports the test framework", _NODE_FIX, True),
    (re.compile(r"\bprocess\s*\.\s*(?:exit(?:Code)?|reallyExit|abort|kill|_\w+|binding|dlopen)\b"),
     "ends or reaches into the process", _NODE_EXIT_FIX, False),
    (re.compile(r"\bprocess\s*\.\s*(?:send|channel|disconnect|emit)\b"),
     "uses the process's channel to its parent", _NODE_FIX, False),
    (re.compile(r"""\bprocess\s*\.\s*(?:on|once|addListener|prependListener|"""
                r"""prependOnceListener)\s*\(\s*(['"`])(?:exit|beforeExit|uncaughtException|"""
                r"""unhandledRejection|message|disconnect|SIG\w+)\1"""),
     "hooks the process's exit, errors or messages", "let errors reach the tests", True),
    (re.compile(rf"\b(?:globalThis|global|window|self)\s*(?:\.\s*(?:{_TEST_GLOBALS})\b|\[)"),
     "reaches the test framework's globals", _NODE_FIX, False),
    (re.compile(r"""\bSymbol\s*\.\s*for\s*\(\s*(['"`])[^'"`]*(?:vitest|jest|matchers|chai)"""),
     "reaches vitest's state", _NODE_FIX, True),
    (re.compile(r"\b(?:VERDICT_FD|VITEST\w*|__vitest\w*)\b"),
     "names vitest or the verdict channel", _NODE_FIX, True),
    (re.compile(r"\brequire\s*\.\s*cache\b|\bModule\s*\.\s*_\w+|\bmodule\s*\.\s*constructor\b"),
     "changes how modules load", "require what you need", False),
    (re.compile(r"\b(?:Object|Function|Promise|Array|Error|Symbol|Reflect|JSON|Map|Set|"
                r"EventEmitter|String|Number)\s*\.\s*(?:prototype\s*\.\s*)?\w+\s*=(?![=>])"),
     "patches a built-in", "define your own function instead of changing a built-in", False),
    (re.compile(r"/proc/"), "reads the process table", _NODE_FIX, True),
]
# The test globals as bare calls (`expect(...)`, `afterEach(...)` with globals on).
_BARE = re.compile(rf"(?<![\w$.])({_TEST_GLOBALS})\s*(?:\.\s*\w+\s*)?\(")
_DECLARED = "(?:function\\*?|const|let|var|class)\\s+{name}\\b|\\b{name}\\s*[,)]\\s*(?:=>|\\{{)"
_COMMENT_OR_STRING = re.compile(
    r"""//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|`(?:\\.|[^`\\])*`""", re.S
)
_VUE_SCRIPT = re.compile(r"(<script\b[^>]*>)(.*?)</script>", re.S | re.I)


def node_findings(path: str, source: str) -> list[Finding]:
    """The findings in one JS/TS/Vue file (of a .vue file, its <script> blocks)."""
    if path.endswith(".vue"):
        source = _vue_scripts(source)
    kept, blanked = strip(source, strings=False), strip(source, strings=True)
    found: dict[tuple[int, str], Finding] = {}
    for pattern, what, fix, in_strings in _NODE_RULES:
        text = kept if in_strings else blanked
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.setdefault((line, what), Finding(path, line, f"{what} (`{m.group(0)}`)", fix))
    for m in _BARE.finditer(blanked):
        name = m.group(1)
        if re.search(_DECLARED.format(name=re.escape(name)), blanked):
            continue  # the module's own function of that name
        line = blanked.count("\n", 0, m.start()) + 1
        found.setdefault((line, "global"), Finding(
            path, line, f"calls vitest's global {name}", _NODE_FIX))
    return sorted(found.values(), key=lambda f: (f.line, f.what))


def strip(source: str, strings: bool) -> str:
    """The source with comments blanked (and, with `strings`, the text inside quotes),
    line breaks kept so lines still count."""

    def blank(m: re.Match[str]) -> str:
        token = m.group(0)
        if token.startswith(("//", "/*")):
            return re.sub(r"[^\n]", " ", token)
        if strings:
            return token[0] + re.sub(r"[^\n]", " ", token[1:-1]) + token[-1]
        return token

    return _COMMENT_OR_STRING.sub(blank, source)


def _vue_scripts(source: str) -> str:
    """A .vue file with everything but its <script> blocks blanked (lines kept)."""
    out = re.sub(r"[^\n]", " ", source)
    for m in _VUE_SCRIPT.finditer(source):
        out = out[: m.start(2)] + m.group(2) + out[m.end(2) :]
    return out
