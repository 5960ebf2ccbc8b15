"""hash_contract on fixed vectors, and the contract bridge's verdicts."""

import pytest

from devloop.core.contracts import (
    SDD_MISMATCH,
    SELF_INCONSISTENT,
    ContractMissingExports,
    canonical,
    contract_bridge,
    hash_contract,
)
from devloop.core.models import UnitsFile


def test_hash_contract_known_vector() -> None:
    assert hash_contract({"exports": {"a": 1, "b": [1, 2]}}) == "sha256:8baa73198470c7bb"


def test_hash_contract_ignores_key_order_and_other_fields() -> None:
    reordered = {"version": "whatever", "exports": {"b": [1, 2], "a": 1}, "unit_id": "x"}
    assert hash_contract(reordered) == "sha256:8baa73198470c7bb"


def test_hash_contract_changes_with_a_value() -> None:
    assert hash_contract({"exports": {"a": 2, "b": [1, 2]}}) == "sha256:39ed791d861c3f4b"


def test_hash_contract_keeps_non_ascii_text_as_utf8() -> None:
    contract = {"exports": {"title": "待办事项", "emoji": "é"}}
    assert canonical(contract["exports"]) == '{"emoji":"é","title":"待办事项"}'.encode()
    assert hash_contract(contract) == "sha256:00d17a4b7a55ccd1"


def test_hash_contract_of_empty_exports() -> None:
    assert hash_contract({"exports": {}}) == "sha256:44136fa355b3678a"


def test_hash_contract_without_exports_is_an_error() -> None:
    with pytest.raises(ContractMissingExports):
        hash_contract({"unit_id": "x"})


def _units(contract_hash: str) -> UnitsFile:
    return UnitsFile.model_validate(
        {
            "company_id": "c",
            "project_id": "p",
            "units": [{"id": "u", "kind": "be", "depends_on": [], "contract_hash": contract_hash}],
        }
    )


EXPORTS = {"http": [{"method": "GET", "path": "/x"}]}
GOOD = hash_contract({"exports": EXPORTS})


def test_bridge_ok_when_version_and_sdd_agree() -> None:
    result = contract_bridge(
        _units(GOOD), "u", {"unit_id": "u", "version": GOOD, "exports": EXPORTS}
    )
    assert result.ok and result.expected == GOOD and result.actual == GOOD


def test_bridge_self_inconsistent_version() -> None:
    contract = {"unit_id": "u", "version": "sha256:0000000000000000", "exports": EXPORTS}
    result = contract_bridge(_units(GOOD), "u", contract)
    assert not result.ok
    assert result.reason == SELF_INCONSISTENT
    assert result.claimed == "sha256:0000000000000000" and result.actual == GOOD


def test_bridge_does_not_match_sdd_hash() -> None:
    other = {"http": [{"method": "GET", "path": "/y"}]}
    contract = {"unit_id": "u", "version": hash_contract({"exports": other}), "exports": other}
    result = contract_bridge(_units(GOOD), "u", contract)
    assert not result.ok
    assert result.reason == SDD_MISMATCH
    assert result.expected == GOOD and result.actual != GOOD
    assert result.hint and "SDD" in result.hint


def test_bridge_missing_contract_and_unknown_unit() -> None:
    assert contract_bridge(_units(GOOD), "u", None).reason == "contract.json missing"
    assert contract_bridge(_units(GOOD), "nope", {}).reason == "unit not in units.json"
