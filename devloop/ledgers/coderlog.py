"""coder.log: the coder's append-only decision log, in the seed's `---` block format.

A block is::

    ---
    attempt: 2
    ts: 2026-05-13T10:32:08Z
    last_failure: ...
    ...
    changed_files: ["code/auth-service.js"]
    ---
    <blank line>

Keys come in the model's field order, then any extra keys; lists and objects are JSON,
None values are left out. A string is written bare unless reading it back bare would
change it (it spans lines, has edge spaces, or would parse as JSON or a list): then it
is written as a JSON string, which the reader decodes. The reader also takes what other
writers produce: the seed's unquoted `[code/a.js, code/b.js]`, indented blocks, values
continued on the following lines.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from devloop.core.errors import DevLoopError
from devloop.core.models import CoderDecision
from devloop.ledgers.sink import AppendSink, Clock, FileSink, iso_z, utc_now

log = logging.getLogger(__name__)

REQUIRED = ("attempt", "this_fix", "rationale", "changed_files")
RETRY_REQUIRED = ("last_failure", "last_cause")  # attempt > 1 must say what went wrong
_TEXT_FIELDS = frozenset({"ts", "last_failure", "last_cause", "this_fix", "rationale"})
_KEY = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_.-]*):(?:[ \t]+(?P<value>.*))?$")
_DELIMITER = "---"
_NOT_JSON = object()


class DecisionInvalid(DevLoopError):
    """A coder.log decision that may not be written (or, strictly read, is not a decision)."""

    def __init__(self, missing: Sequence[str] = (), detail: str = "") -> None:
        self.missing = list(missing)
        self.detail = detail
        parts = [f"coder.log decision missing fields: {', '.join(self.missing)}"] if missing else []
        parts += [detail] if detail else []
        super().__init__("; ".join(parts) or "coder.log decision invalid")


def format_decision(decision: CoderDecision) -> str:
    """One coder.log block: `---`, `key: value` lines, `---`, a blank line."""
    body = "\n".join(f"{k}: {_render(k, v)}" for k, v in decision.to_json_dict().items())
    return f"{_DELIMITER}\n{body}\n{_DELIMITER}\n\n"


def parse_coder_log(text: str, *, strict: bool = False) -> list[CoderDecision]:
    """The decisions in coder.log text; invalid blocks are skipped, or raise when strict."""
    decisions: list[CoderDecision] = []
    for line_no, pairs in _blocks(text):
        data = {key: _parse_value(key, value.strip()) for key, value in pairs}
        try:
            decisions.append(CoderDecision.model_validate(data))
        except ValidationError as exc:
            missing = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing"]
            detail = f"block at line {line_no}: {_brief(exc)}"
            if strict:
                raise DecisionInvalid(missing, detail) from exc
            log.warning("coder.log %s; skipped", detail)
    return decisions


def append_decision(
    target: AppendSink | str | os.PathLike[str],
    decision: Mapping[str, Any] | CoderDecision,
    *,
    now: Clock = utc_now,
    retry: bool | None = None,
) -> CoderDecision:
    """Validate a decision like the seed's appendCoderLog, stamp `ts` if absent, append it."""
    data = decision.to_json_dict() if isinstance(decision, CoderDecision) else dict(decision)
    model = validate_decision(data, now=now, retry=retry)
    sink = FileSink(target) if isinstance(target, str | os.PathLike) else target
    sink.append(format_decision(model))  # the whole block in one locked append
    return model


def validate_decision(
    data: Mapping[str, Any], *, now: Clock = utc_now, retry: bool | None = None
) -> CoderDecision:
    """The decision as a model, or DecisionInvalid naming every missing field.

    A retry must say what went wrong; `retry` None: every attempt after the first is one
    (False: an attempt that starts from implement again, with no failure behind it)."""
    missing = [k for k in REQUIRED if _blank(data.get(k))]
    attempt = _attempt(data.get("attempt"))
    if retry is None:
        retry = attempt is not None and attempt > 1
    if retry and attempt is not None and attempt > 1:
        missing += [k for k in RETRY_REQUIRED if _blank(data.get(k))]
    if missing:
        raise DecisionInvalid(missing)
    if attempt is None or attempt < 1:
        raise DecisionInvalid(detail=f"attempt must be a positive integer, got {data['attempt']!r}")
    bad_keys = [k for k in data if not _KEY.match(f"{k}:")]
    if bad_keys:
        raise DecisionInvalid(detail=f"keys must look like identifiers: {bad_keys}")
    stamped = dict(data)
    if _blank(stamped.get("ts")):
        stamped["ts"] = iso_z(now())
    try:
        return CoderDecision.model_validate(stamped)
    except ValidationError as exc:
        raise DecisionInvalid(detail=_brief(exc)) from exc


def read_decisions(target: AppendSink | str | os.PathLike[str]) -> list[CoderDecision]:
    """The decisions stored in a coder.log sink or file (missing file: none)."""
    sink = FileSink(target) if isinstance(target, str | os.PathLike) else target
    return parse_coder_log("\n".join(sink.lines()))


def _blocks(text: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(line number, key/value pairs) of each closed block; an unclosed last block is dropped."""
    pairs: list[tuple[str, str]] | None = None
    start = 0
    # split("\n"), not splitlines(): a value may hold U+2028 or a form feed.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if line == _DELIMITER:
            if pairs is None:
                pairs, start = [], number
            else:
                yield start, pairs
                pairs = None
        elif pairs is not None and (match := _KEY.match(line)):
            pairs.append((match["key"], match["value"] or ""))
        elif pairs:
            # A line that is not `key: value` continues the previous value (raw
            # multi-line text from a writer that does not quote it).
            key, value = pairs[-1]
            pairs[-1] = (key, f"{value}\n{line}")


def _parse_value(key: str, raw: str) -> Any:
    """A stored value as its field expects it; text stays text unless it is a JSON string."""
    if key in _TEXT_FIELDS:
        decoded = _json_or(raw, None) if raw.startswith('"') else None
        return decoded if isinstance(decoded, str) else raw
    if key == "attempt":
        return raw  # pydantic turns "2" into 2
    if key == "changed_files":
        value = _json_or(raw, None) if raw.startswith("[") else None
        if isinstance(value, list):
            return value
        if raw.startswith("[") and raw.endswith("]"):
            return _bare_list(raw)
        return [raw] if raw else []
    value = _json_or(raw, _NOT_JSON)
    if value is not _NOT_JSON:
        return value
    return _bare_list(raw) if raw.startswith("[") and raw.endswith("]") else raw


def _render(key: str, value: Any) -> str:
    """A value as written after `key: `."""
    if not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    bare_is_exact = (
        "\n" not in value
        and "\r" not in value
        and value == value.strip()
        and _parse_value(key, value) == value
    )
    return value if bare_is_exact else json.dumps(value, ensure_ascii=False)


def _bare_list(raw: str) -> list[str]:
    """The seed's YAML-ish `[code/a.js, 'code/b.js']` as a list of strings."""
    items = (item.strip().strip("'\"") for item in raw[1:-1].split(","))
    return [item for item in items if item]


def _json_or(raw: str, default: Any) -> Any:
    """raw decoded as JSON, or default."""
    try:
        return json.loads(raw)
    except ValueError:
        return default


def _attempt(value: Any) -> int | None:
    """The attempt number as an int, or None if it is not one."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _blank(value: Any) -> bool:
    """Missing in the seed's `!decision[k]` sense, plus empty lists and blank text."""
    return value is None or (not value.strip() if isinstance(value, str) else not value)


def _brief(exc: ValidationError) -> str:
    """A pydantic error as one line: `field: message` pairs."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
