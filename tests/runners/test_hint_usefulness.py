"""The tester self-check on hints, in any language: generic words, a bare expected/got or the
test's own name say nothing; a hint that names the code and says what to do does."""

from __future__ import annotations

import pytest

from devloop.runners.hints import build_hint, is_useful_hint

TEST = "tests/test_auth.py::test_login_with_a_wrong_password_returns_401"


@pytest.mark.parametrize(
    "hint",
    [
        "please fix",
        "Please fix the failing test.",
        "The code is wrong, please update it so the test passes.",
        "expected 401, got 500",
        "期望 401 收 500",
        "期望 401 收 500，检查对应分支处理",
        "请修复这个错误",
        "Veuillez corriger le bug.",
        "Bitte den Fehler beheben.",
        "Por favor arregla el error.",
        "Пожалуйста, исправьте ошибку.",
        "バグを修正してください",
        "버그를 수정하세요",
        TEST,
        f"{TEST}: please fix",
        "test login with a wrong password returns 401 fails",
        # Generic prose with enough words still names nothing in the code.
        "Check the handler logic more carefully and rewrite it",
        "The password check throws when the stored hash is missing: compare only when the "
        "account exists and answer with the unauthorised status otherwise",
        # The hint builder's own fallback drafts: the tester must improve them.
        build_hint(TEST, "alice", None, ""),
        build_hint(TEST, None, None, "boom"),
    ],
)
def test_generic_hints_are_refused_in_any_language(hint: str) -> None:
    assert not is_useful_hint(hint, TEST, 401, 500)


def test_a_hint_may_name_the_code_by_the_names_it_exports() -> None:
    hint = "The password check throws when the stored hash is missing: compare in login only"
    assert not is_useful_hint(hint, TEST, 401, 500)
    assert is_useful_hint(hint, TEST, 401, 500, names={"login", "register"})


@pytest.mark.parametrize(
    "hint",
    [
        "`users.find(name)` returns None for an unknown user; answer 401 before bcrypt.compare",
        "user 不存在时不要 bcrypt.compare(null, ...)；先查 user 再比，缺失就返回 401",
        "login() dans code/auth.py compare le mot de passe avant de vérifier l'utilisateur",
        "The password check in login() throws when the stored hash is missing: compare "
        "only when the account exists and answer with the unauthorised status otherwise",
        "POST /login answers 500 for an unknown user: look the user up first and answer 401",
    ],
)
def test_hints_that_name_the_code_and_the_change_pass_in_any_language(hint: str) -> None:
    assert is_useful_hint(hint, TEST, 401, 500)
