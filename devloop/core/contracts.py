"""Contract hashing and the contract bridge (contract.json vs units.json). Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from devloop.core.errors import DevLoopError
from devloop.core.models import UnitsFile

SELF_INCONSISTENT = "contract.version self-inconsistent"
SDD_MISMATCH = "contract does not match SDD-declared hash"


class ContractMissingExports(DevLoopError, ValueError):
    """A contract has no `exports` object to hash."""


def canonical(value: Any) -> bytes:
    """The byte form every hash is taken over: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def hash_contract(contract: Mapping[str, Any]) -> str:
    """`sha256:` + the first 16 hex digits of sha256(canonical(contract["exports"]))."""
    if "exports" not in contract:
        raise ContractMissingExports("contract has no \"exports\" field")
    return "sha256:" + hashlib.sha256(canonical(contract["exports"])).hexdigest()[:16]


class BridgeResult(BaseModel):
    """Whether a unit's contract.json agrees with itself and with the SDD hash."""

    ok: bool
    expected: str | None = None
    actual: str | None = None
    claimed: str | None = None
    reason: str | None = None
    hint: str | None = None


def contract_bridge(
    units: UnitsFile, unit_id: str, contract: Mapping[str, Any] | None
) -> BridgeResult:
    """Check a coder's contract.json against its own version and units.json's hash."""
    entry = units.unit(unit_id)
    if entry is None:
        return BridgeResult(ok=False, reason="unit not in units.json")
    expected = entry.contract_hash
    if contract is None:
        return BridgeResult(
            ok=False,
            expected=expected,
            reason="contract.json missing",
            hint="write contract.json with unit_id, version, exports and consumes",
        )
    try:
        actual = hash_contract(contract)
    except ContractMissingExports:
        return BridgeResult(
            ok=False,
            expected=expected,
            reason="contract.json has no exports",
            hint="add the exports object the SDD describes",
        )
    claimed = contract.get("version")
    if claimed != actual:
        return BridgeResult(
            ok=False,
            expected=expected,
            actual=actual,
            claimed=str(claimed),
            reason=SELF_INCONSISTENT,
            hint=f'set "version" to the hash_contract result "{actual}"; never compute it by hand',
        )
    if actual != expected:
        return BridgeResult(
            ok=False,
            expected=expected,
            actual=actual,
            claimed=str(claimed),
            reason=SDD_MISMATCH,
            hint="your exports differ from the SDD contract: align the code and exports "
            "with the SDD section instead of changing the hash",
        )
    return BridgeResult(ok=True, expected=expected, actual=actual, claimed=str(claimed))
