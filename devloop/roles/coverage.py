"""Which tests exercise which acceptance criterion and status code, read from their source. Pure.

A test exercises a criterion when its name or docstring (python) or its title (vitest's
`it('...')`) says what the criterion says: the words they share (lower-cased, stemmed,
stop words out) are at least two and at least half of the shorter of the two. A test
named after several criteria exercises those whose values its code uses (`add(250,
100) returns 350`: 250, 100 or 350), so one test named after three criteria that checks
one of them covers that one; a docstring that is one criterion word for word names
that one alone. Named or not, a test whose code uses every value of a
criterion and calls what it names exercises it too. Counting tests is
not enough: a suite of ten tests of one criterion still misses the other two. A status
code the contract declares is exercised by a test whose code (comments and titles left
out) has its number: for an error status, the negative case. Whether a test can fail
at all is the hollow build's to say (devloop/roles/adequacy.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_STOP_WORDS = (
    "a an the and or of to with by for in on at is are be been it its that this these "
    "those test tests should when then than as from into"
)
STOP = frozenset(_STOP_WORDS.split())
_PY_TEST = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(test_\w*)[ \t]*\(", re.M)
_JS_TEST = re.compile(
    r"\b(?:it|test)(?:\.(?:each\([^)]*\)|only|skip|concurrent))*\s*\(\s*"
    r"(['\"`])((?:\\.|(?!\1).)*)\1",
    re.S,
)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
# The values a criterion names: numbers (not inside a word) and quoted strings.
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_QUOTED = re.compile(r"(['\"`])([^'\"`\n]{1,80})\1")
_CALLED = re.compile(r"\b([A-Za-z_$][\w$]*)\s*\(")
_DENSE = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\u30a0-\u30ff\uac00-\ud7af]")


@dataclass(frozen=True)
class TestBlock:
    """One test: its name (function name or it() title), docstring, and source."""

    __test__ = False  # not a pytest test class

    path: str
    name: str
    doc: str
    body: str
    # The test's code alone: no comments, no docstring, no title.
    code: str = ""


def blocks(sources: dict[str, str], stack: str) -> list[TestBlock]:
    """Every test in the sources, each with the source up to the next test."""
    found: list[TestBlock] = []
    for path, text in sorted(sources.items()):
        parsed = _python_tests(path, text) if stack == "python" else None
        if parsed is not None:
            found += parsed
            continue
        matches = list((_PY_TEST if stack == "python" else _JS_TEST).finditer(text))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            body = text[m.start() : end]
            code = js_code(text[m.end() : end]) if stack != "python" else body
            found.append(TestBlock(path, m.group(2), "", body, code))
    return found


def js_code(text: str) -> str:
    """JavaScript source without its comments (strings kept as they are)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _python_tests(path: str, text: str) -> list[TestBlock] | None:
    """The test functions of a python file with their docstrings (None: it does not parse;
    parsing never runs it)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = text.splitlines()
    out: list[tuple[int, TestBlock]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            body = "\n".join(lines[node.lineno - 1 : node.end_lineno or node.lineno])
            block = TestBlock(path, node.name, ast.get_docstring(node) or "", body, _code(node))
            out.append((node.lineno, block))
    return [block for _, block in sorted(out, key=lambda pair: pair[0])]


def _code(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """A test function's decorators (parametrize) and statements as code (comments and
    docstring gone)."""
    statements: list[ast.AST] = [*node.decorator_list, *node.body]
    if ast.get_docstring(node) is not None:
        statements.remove(node.body[0])
    try:
        return "\n".join(ast.unparse(s) for s in statements)
    except (ValueError, RecursionError):
        return ""


def values(text: str) -> set[str]:
    """The numbers and quoted strings a criterion names."""
    found = {m.group(0) for m in _NUMBER.finditer(text)}
    found |= {m.group(2) for m in _QUOTED.finditer(text)}
    return found


def _uses(code: str, value: str) -> bool:
    """Whether test code uses a value or name: a number as a number, a name as a word,
    a string anywhere."""
    if _NUMBER.fullmatch(value):
        return re.search(rf"(?<![\w.]){re.escape(value)}(?![\w])", code) is not None
    if re.fullmatch(r"[A-Za-z_$][\w$]*", value):  # a name, also as a method: repo.add(
        return re.search(rf"(?<![\w$]){re.escape(value)}(?![\w$])", code) is not None
    return value in code


def words(text: str) -> set[str]:
    """Stemmed, lower-cased content words (camelCase and snake_case split; CJK by char)."""
    split = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    out: set[str] = set()
    for token in _TOKEN.findall(split):
        if _DENSE.search(token):
            out.update(_DENSE.findall(token))
            continue
        word = _stem(token.lower())
        if len(word) >= 2 and word not in STOP:
            out.add(word)
    return out


def _stem(word: str) -> str:
    """A crude English stem: added/adds/adding -> add, take/takes/taking -> tak."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def named(criterion: str, block: TestBlock) -> bool:
    """Whether the test's name or docstring says what the criterion says."""
    want = words(criterion)
    said = words(block.name) | words(block.doc)
    if not want or not said:
        return False
    common = want & said
    return len(common) >= min(2, len(want)) and len(common) >= min(len(want), len(said)) / 2


def covers(criterion: str, block: TestBlock, criteria: list[str] | None = None) -> bool:
    """Whether the test exercises the criterion, one of `criteria` (see the module
    docstring)."""
    wanted = values(criterion)
    used = {v for v in wanted if _uses(block.code, v)}
    calls = set(_CALLED.findall(criterion))
    declared = [c for c in criteria or [criterion] if _plain(c) == _plain(block.doc)]
    if declared:  # its docstring is one criterion word for word: that one is its own
        return declared[0] == criterion
    if named(criterion, block):
        others = [c for c in criteria or [] if c != criterion and named(c, block)]
        if not others:
            return True
        anchors = wanted or calls  # what this criterion, and not the others, names
        return not anchors or any(_uses(block.code, a) for a in anchors)
    return bool(wanted) and used == wanted and any(_uses(block.code, c) for c in calls)


def _plain(text: str) -> str:
    """A sentence compared as written, case, spacing and a final stop aside."""
    return " ".join(text.lower().split()).rstrip(".")


def uncovered_criteria(criteria: list[str], tests: list[TestBlock]) -> list[str]:
    """The acceptance criteria no test exercises."""
    return [c for c in criteria if not any(covers(c, t, criteria) for t in tests)]


def checks_code(code: str, block: TestBlock) -> bool:
    """Whether the test's code (comments and titles left out) has the status code."""
    return re.search(rf"(?<![\w.]){code}(?![\w.])", block.code) is not None


def uncovered_codes(codes: list[str], tests: list[TestBlock]) -> list[str]:
    """The status codes no test's code provokes and checks."""
    return [code for code in codes if not any(checks_code(code, t) for t in tests)]


def coverage(
    sources: dict[str, str], stack: str, criteria: list[str], codes: list[str]
) -> tuple[int, float, float]:
    """(test count, share of criteria exercised, share of status codes exercised)."""
    tests = blocks(sources, stack)
    acc = 1 - len(uncovered_criteria(criteria, tests)) / len(criteria) if criteria else 1.0
    con = 1 - len(uncovered_codes(codes, tests)) / len(codes) if codes else 1.0
    return len(tests), acc, con
