"""Which tests cover which acceptance criterion and status code, read from their source. Pure.

A test covers a criterion when its name or docstring (python) or its title (vitest's
`it('...')`) says what the criterion says: the words they share (lower-cased, stemmed,
stop words out) are at least two and at least half of the shorter of the two. Counting
tests is not enough: each criterion is matched by name, so a suite of ten tests of one
criterion still misses the other two. A status code the contract declares is covered by
a test whose body provokes and checks it (its number in the test's body): for an error
status, the negative case.
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
_DENSE = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\u30a0-\u30ff\uac00-\ud7af]")


@dataclass(frozen=True)
class TestBlock:
    """One test: its name (function name or it() title), docstring, and source."""

    __test__ = False  # not a pytest test class

    path: str
    name: str
    doc: str
    body: str


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
            found.append(TestBlock(path, m.group(2), "", text[m.start() : end]))
    return found


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
            block = TestBlock(path, node.name, ast.get_docstring(node) or "", body)
            out.append((node.lineno, block))
    return [block for _, block in sorted(out, key=lambda pair: pair[0])]


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


def covers(criterion: str, block: TestBlock) -> bool:
    """Whether the test's name or docstring says what the criterion says."""
    want = words(criterion)
    said = words(block.name) | words(block.doc)
    if not want or not said:
        return False
    common = want & said
    return len(common) >= min(2, len(want)) and len(common) >= min(len(want), len(said)) / 2


def uncovered_criteria(criteria: list[str], tests: list[TestBlock]) -> list[str]:
    """The acceptance criteria no test is named after."""
    return [c for c in criteria if not any(covers(c, t) for t in tests)]


def uncovered_codes(codes: list[str], tests: list[TestBlock]) -> list[str]:
    """The status codes no test's body provokes and checks."""
    return [
        code
        for code in codes
        if not any(re.search(rf"(?<![\w.]){code}(?![\w.])", t.body) for t in tests)
    ]


def coverage(
    sources: dict[str, str], stack: str, criteria: list[str], codes: list[str]
) -> tuple[int, float, float]:
    """(test count, share of criteria covered by name, share of status codes covered)."""
    tests = blocks(sources, stack)
    acc = 1 - len(uncovered_criteria(criteria, tests)) / len(criteria) if criteria else 1.0
    con = 1 - len(uncovered_codes(codes, tests)) / len(codes) if codes else 1.0
    return len(tests), acc, con
