"""What a folder may hold by DevLoop's hand: a torn export is no edit, the user's edits are."""

from __future__ import annotations

from devloop.store import ondisk

OLD = {"code/a.py": b"a1\n", "code/b.py": b"b1\n", "code/gone.py": b"g\n"}
NEW = {"code/a.py": b"a2\n", "code/b.py": b"b2\n", "code/c.py": b"c2\n"}


def test_every_half_written_state_of_an_export_is_no_edit() -> None:
    known = ondisk.widened(ondisk.known_of(OLD), NEW, ["code/gone.py"])
    # Each path holds its old content or its new one, in any mix, as a kill leaves it.
    for mask in range(2 ** 4):
        folder = {}
        for bit, rel in enumerate(["code/a.py", "code/b.py", "code/c.py", "code/gone.py"]):
            pick = (NEW if mask >> bit & 1 else OLD).get(rel)
            if pick is not None:
                folder[rel] = pick
        assert ondisk.user_changes(folder, known, NEW) == {}, folder


def test_the_users_edit_addition_and_deletion_are_changes_path_by_path() -> None:
    known = ondisk.known_of(OLD)
    current = {**OLD, "code/later.py": b"committed since the last export\n"}
    folder = {"code/a.py": b"mine\n", "code/gone.py": b"g\n", "code/new.py": b"n\n"}
    changes = ondisk.user_changes(folder, known, current)
    assert changes == {"code/a.py": b"mine\n", "code/new.py": b"n\n", "code/b.py": None}
    assert ondisk.applied(current, changes) == {
        "code/a.py": b"mine\n", "code/gone.py": b"g\n", "code/new.py": b"n\n",
        "code/later.py": b"committed since the last export\n",
    }


def test_a_folder_known_to_nothing_counts_whatever_differs_from_redis() -> None:
    assert ondisk.user_changes(OLD, {}, NEW) == OLD
    assert ondisk.decode(b"not json") == {} == ondisk.decode(b"[1]")
    assert ondisk.decode(ondisk.encode(ondisk.known_of(NEW))) == ondisk.known_of(NEW)


def test_only_a_write_atomic_temp_name_is_a_temp_file() -> None:
    assert ondisk.TEMP_NAME.fullmatch(".ledger.py.0123456789abcdef.tmp")
    assert not ondisk.TEMP_NAME.fullmatch("ledger.py.0123456789abcdef.tmp")
    assert not ondisk.TEMP_NAME.fullmatch(".ledger.py.tmp")
