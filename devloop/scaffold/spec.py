"""The compact project spec `devloop new --from spec.yaml` reads, as pydantic models.

company_id: c-acme
project_id: p-shop
stack: python            # the project's default stack: python | node
conventions: |           # optional, written to conventions.md
  ...
units:
  - id: stock
    kind: lib            # be | fe | db | mw | lib
    stack: node          # optional: overrides the project's stack for this unit
    title: Stock         # optional: the SDD section's heading
    description: ...     # optional: a paragraph of the SDD section
    depends_on: []
    exports: {module: {"code/stock.py": {"reserve(sku, qty)": "-> bool"}}}
    consumes: []
    acceptance:
      - reserve() refuses more than the stock
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from devloop.core.ids import CompanyId, ProjectId, UnitId
from devloop.core.models import Review, Stack, UnitKind


class _Strict(BaseModel):
    """Unknown fields are errors: a misspelt key must not be silently dropped."""

    model_config = ConfigDict(extra="forbid")


class NewUnit(_Strict):
    """One unit of the spec."""

    id: UnitId
    kind: UnitKind
    stack: Stack | None = None
    title: str | None = None
    description: str | None = None
    depends_on: list[UnitId] = Field(default_factory=list)
    exports: dict[str, Any]
    consumes: list[Any] = Field(default_factory=list)
    acceptance: list[str] = Field(min_length=1)
    review: Review | None = None  # "required": green tests wait for a person's approval

    @field_validator("acceptance")
    @classmethod
    def _one_line_each(cls, value: list[str]) -> list[str]:
        # The SDD parser folds whitespace inside <li>; folding here keeps spec.json equal to it.
        folded = [" ".join(item.split()) for item in value]
        for i, item in enumerate(folded):
            if not item:
                raise ValueError(
                    f"item {i} is empty; fix: write a sentence a test can check, or remove it"
                )
        return folded

    @field_validator("exports", "consumes")
    @classmethod
    def _plain_json(cls, value: Any) -> Any:
        # YAML reads 2024-01-01 as a date and more; the contract is JSON, hashed as such.
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not plain JSON ({exc}); fix: quote dates and other values") from None
        return value

    @property
    def contract(self) -> dict[str, Any]:
        """The SDD contract: what units.json's contract_hash is taken over."""
        return {"exports": self.exports, "consumes": self.consumes}


class NewProject(_Strict):
    """The whole spec."""

    company_id: CompanyId
    project_id: ProjectId
    stack: Stack
    conventions: str | None = None
    review: Review | None = None  # every unit's default (a unit's own `review` wins)
    units: list[NewUnit] = Field(min_length=1)

    def stack_of(self, unit: NewUnit) -> Stack:
        """The unit's own stack, else the project's."""
        return unit.stack or self.stack


# The fix for a missing (or empty) field: what to write.
FIXES = {
    "company_id": "add `company_id: c-acme`",
    "project_id": "add `project_id: p-shop`",
    "stack": "add `stack: python` or `stack: node`",
    "units": "add `units:` with one `- id: ...` entry per unit",
    "id": "add `id: stock`, unique in the project",
    "kind": "add `kind: lib` (or be, fe, db, mw)",
    "exports": 'add `exports:` with what the unit offers, e.g. {module: {"code/stock.py": '
    '{"reserve(sku, qty)": "-> bool"}}}',
    "acceptance": "add `acceptance:` with one sentence a test can check per item",
}
