"""Whether a sentence says something concrete, in any language. Pure.

The tester's hints and the coder's reflections must tell the next reader what to change
and where. "Please fix", "修复 bug", a bare "expected 400 got 500" or the test's own name
say nothing. The check is the same in every language: take out the words any failure
report would use (fix, bug, error, expected, got, please, ... in a dozen languages), the
values, and the words of the test's name; what is left must name something (an
identifier, a file, a call: `req.body.title`, code/a.py, line_total) and say a little
about it, or say enough in plain words. Scripts without spaces (Chinese, Japanese) count
by characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Words a report of any failure uses: they say nothing about this one.
_GENERIC_WORDS = """
    a an the and or but so to of in on at by for from with without into is are was were be
    been being it its this that these those there here then than as if when while please
    fix fixed fixes fixing repair repaired correct corrected bug bugs error errors issue
    issues problem problems fault wrong broken break breaks test tests testing failing fail
    fails failed failure failures pass passes passed passing expected expect expects got
    get gets received receive returned actual actually instead but should shall must need
    needs needed make made makes do does did done work works working change changed update
    updated code check checked look see try again still now just also case value values
    result results output thing something it's that's not no yes ok okay properly right
    correctly same
    bitte fehler beheben behebe beheben korrigieren korrigiere erwartet erhalten bekommen
    der die das den dem und oder nicht ist sind
    por favor arregla arreglar arreglado corrige corregir corregido fallo falla prueba
    esperado esperaba obtenido recibido el la los las un una y o es no
    veuillez corriger corrigez corrigé le les un une et ou est pas erreur attendu obtenu reçu
    per favore correggi correggere errore atteso ottenuto il lo gli
    corrija corrigir esperava recebido obtido falha teste
    пожалуйста исправьте исправить исправь ошибку ошибка ошибки баг тест ожидалось
    получено получили должно нужно
"""
GENERIC = frozenset(_GENERIC_WORDS.split())
# Phrases of scripts written without spaces, taken out before characters are counted.
_GENERIC_DENSE = """
    请修复 修复 修正 修改 改正 解决 请 错误 问题 缺陷 测试 失败 期望 预期 期待 实际 收到 得到
    返回 应该 应当 需要 检查 对应 分支 处理 代码 一下 这个 那个 没有 不对 不是 通过 结果 收
    バグ 修正 テスト 失敗 期待 実際 エラー 問題 確認 してください ください
    버그 수정 테스트 실패 오류 문제 예상 실제 하세요 해주세요 고쳐 확인 를 을 이 가 는 은
"""
# Longest first, so a phrase is taken out before a part of it.
GENERIC_PHRASES = tuple(sorted(set(_GENERIC_DENSE.split()), key=len, reverse=True))
_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
# Ideographs, katakana and hangul carry meaning alone; hiragana is mostly particles.
_DENSE = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\u30a0-\u30ff\uac00-\ud7af]")
_ANCHOR = re.compile(
    r"`[^`\s][^`]*`"  # `anything in backticks`
    r"|\b[\w$]+(?:\.[\w$]+)+\b"  # a.b.c, file.py, bcrypt.compare
    r"|\b\w+/[\w./-]+"  # code/a.py, a/b
    r"|\b[A-Za-z_$][\w$]*\("  # call(
    r"|\b[a-z][a-z0-9]*_[a-z0-9_]+\b"  # snake_case
    r"|\b[a-z]+[A-Z]\w*\b"  # camelCase
    r"|\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b"  # CamelCase, KeyError
    r"|\[['\"][^'\"]+['\"]\]"  # ["key"]
)
MIN_WORDS_ANCHORED = 1  # content words besides what it names
MIN_WORDS_PLAIN = 4


def _without(text: str, strip: Iterable[str]) -> str:
    """The text with each of `strip` (the test name, the values) taken out."""
    for item in sorted({s for s in strip if s and len(s.strip()) > 0}, key=len, reverse=True):
        text = re.sub(re.escape(item.strip()), " ", text, flags=re.I)
    return text


def _name_words(names: Iterable[str]) -> set[str]:
    """The words of test names (`test_line_total_of_one` -> line, total, one)."""
    words: set[str] = set()
    for name in names:
        words.update(w.lower() for w in re.findall(r"[^\W\d_]+", name or "", re.UNICODE))
    return words


def content_words(text: str, also_generic: Iterable[str] = ()) -> int:
    """How much a text says beyond the generic: its words that are not generic, plus one
    per two characters of dense scripts (Chinese, Japanese, Korean)."""
    generic = GENERIC | set(also_generic)
    words = [w for w in _WORD.findall(text) if w.lower() not in generic and not _DENSE.match(w)]
    dense = text
    for phrase in GENERIC_PHRASES:
        dense = dense.replace(phrase, " ")
    for word in also_generic:
        dense = dense.replace(word, " ")
    return len(words) + len(_DENSE.findall(dense)) // 2


def is_specific(text: str | None, *, names: Iterable[str] = (), values: Iterable[str] = ()) -> bool:
    """Whether `text` says something concrete once the test `names` and the `values`
    (expected, got) are taken out."""
    names = [n for n in names if n]
    rest = _without(text or "", [*names, *values])
    rest = re.sub(r"\d+(?:\.\d+)?", " ", rest)
    if not rest.strip(" \t\n.,;:!?-—()[]{}'\"`，。；：！？、"):
        return False
    drop = _name_words(names)
    anchors = _ANCHOR.findall(rest)
    unanchored = _ANCHOR.sub(" ", rest)
    said = content_words(unanchored, drop)
    if anchors:
        return said >= MIN_WORDS_ANCHORED
    return said >= MIN_WORDS_PLAIN
