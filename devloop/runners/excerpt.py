"""The tester's excerpt of the unit's code: what each file under code/ exports. Pure reads.

The tester specification's prompt carries "the export interface of code/ and
contract.json": `code/service.js: create(title), list()`. Names come from the source
without running it (python's ast, patterns for JavaScript and Vue), at most a few files
and lines, read through the view's handle. The coder wrote all of it: the runtime fences
it as untrusted data in the first user turn.
"""

from __future__ import annotations

import ast
import re

from devloop.safe.safedir import Dir
from devloop.safe.safetree import Limits, TooMany, walk

MAX_FILES = 30
MAX_LINE = 300
FILE_CAP = 512 * 1024
SUFFIXES = (".py", ".js", ".cjs", ".mjs", ".ts", ".vue")
# A function's head up to its opening parenthesis; the parameters are read balanced, so a
# default value with parentheses (`service = createTodoService()`) is not cut short.
_JS_FUNC = r"(?:async\s+)?function\s*\*?\s*{name}\s*\("
_JS_ARROW = r"\b(?:const|let|var)\s+{name}\s*=\s*(?:async\s*)?\("
_EXPORTS_OBJ = re.compile(r"module\.exports\s*=\s*\{([^}]*)\}")
_EXPORTS_ONE = re.compile(r"module\.exports\s*=\s*([A-Za-z_$][\w$]*)\s*;?\s*$", re.M)
_EXPORTS_DOT = re.compile(r"(?:module\.)?exports\.([A-Za-z_$][\w$]*)\s*=")
_ESM = re.compile(
    r"^export\s+(default\s+)?(?:async\s+)?(function\s*\*?|class|const|let|var)\s*([A-Za-z_$][\w$]*)?",
    re.M,
)
_ESM_LIST = re.compile(r"^export\s*\{([^}]*)\}", re.M)
_EXPRESS = re.compile(r"\b(?:express|Router)\s*\(")
_PROPS = re.compile(r"defineProps\s*\(([^;]*?)\)\s*;?\s*$", re.M | re.S)
_EMITS = re.compile(r"defineEmits\s*\(([^)]*)\)")


def code_exports(view: Dir, unit_rel: str) -> list[str]:
    """One line per source file under code/: `code/x.py: f(a, b), C`."""
    code = f"{unit_rel}/code"
    try:
        if not view.is_dir(code):
            return []
        entries = walk(view, code, Limits())
        files = sorted(e.rel for e in entries if e.kind == "file" and e.rel.endswith(SUFFIXES))
    except (TooMany, OSError):
        return []
    lines = []
    for rel in files[:MAX_FILES]:
        try:
            text = view.read_text(f"{code}/{rel}", cap=FILE_CAP)
        except (OSError, UnicodeDecodeError):
            continue
        names = python_exports(text) if rel.endswith(".py") else js_exports(rel, text)
        lines.append(_line(f"code/{rel}: ", names))
    if len(files) > MAX_FILES:
        lines.append(f"... and {len(files) - MAX_FILES} more files under code/")
    return lines


def _line(head: str, names: list[str]) -> str:
    """`head` and the names, whole ones only: past MAX_LINE the rest are counted, never cut
    mid-signature."""
    if not names:
        return head + "(no exports found)"
    shown: list[str] = []
    for i, name in enumerate(names):
        rest = len(names) - i - 1
        more = f", ... and {rest} more (read the file)" if rest else ""
        if shown and len(head + ", ".join([*shown, name]) + more) > MAX_LINE:
            return head + ", ".join(shown) + f", ... and {len(names) - i} more (read the file)"
        shown.append(name)
    return head + ", ".join(shown)


def _balanced(text: str, start: int) -> str | None:
    """The parenthesised text opening at text[start] == "(", whole, or None."""
    depth = 0
    for i in range(start, min(len(text), start + 2000)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
    return None


def python_exports(text: str) -> list[str]:
    """Public top-level functions (with their parameters), classes (with public methods)
    and constants of a module; a module that does not parse says so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ["(does not parse)"]
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
            out.append(f"{node.name}({_params(node.args)})")
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            methods = [
                f"{m.name}({_params(m.args, skip_self=True)})"
                for m in node.body
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                and (_public(m.name) or m.name == "__init__")
            ]
            out.append(f"class {node.name}" + (f" [{', '.join(methods)}]" if methods else ""))
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
    return out


def _public(name: str) -> bool:
    return not name.startswith("_")


def _params(args: ast.arguments, skip_self: bool = False) -> str:
    """Parameter names as written (`a, b=..., *rest, key`)."""
    names = [a.arg for a in [*args.posonlyargs, *args.args]]
    if skip_self and names and names[0] in ("self", "cls"):
        names = names[1:]
    if args.vararg:
        names.append(f"*{args.vararg.arg}")
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append(f"**{args.kwarg.arg}")
    return ", ".join(names)


def js_exports(rel: str, text: str) -> list[str]:
    """CommonJS and ES module exports, with function parameters where they are defined
    in the file; a Vue component's props and emits."""
    if rel.endswith(".vue"):
        return _vue(text)
    names: list[str] = []
    if m := _EXPORTS_OBJ.search(text):
        names += [p.split(":")[0].strip() for p in m.group(1).split(",") if p.strip()]
    if m := _EXPORTS_ONE.search(text):
        names.append(m.group(1))
    names += _EXPORTS_DOT.findall(text)
    for m in _ESM.finditer(text):
        names.append(m.group(3) or "default")
    for m in _ESM_LIST.finditer(text):
        names += [p.split(" as ")[-1].strip() for p in m.group(1).split(",") if p.strip()]
    out = []
    for name in dict.fromkeys(n for n in names if re.fullmatch(r"[A-Za-z_$][\w$]*", n)):
        head = re.search(_JS_FUNC.format(name=re.escape(name)), text) or re.search(
            _JS_ARROW.format(name=re.escape(name)), text
        )
        params = _balanced(text, head.end() - 1) if head else None
        if params:
            out.append(f"{name}{' '.join(params.split())}")
        elif _EXPRESS.search(text) and re.search(rf"\b{re.escape(name)}\s*=\s*express\(", text):
            out.append(f"{name} (an Express app)")
        else:
            out.append(name)
    return out


def _vue(text: str) -> list[str]:
    """A single-file component: its props and emits, as declared."""
    parts = ["a Vue component"]
    if m := _PROPS.search(text):
        parts.append("props " + " ".join(m.group(1).split())[:150])
    if m := _EMITS.search(text):
        parts.append("emits " + " ".join(m.group(1).split())[:100])
    return parts
