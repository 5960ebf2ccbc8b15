"""The console's templates: jinja2 with autoescape, the report's DAG drawing and filters,
and live colours for every unit status."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from devloop.console.auth import KEY_PARAM, STORED_KEY
from devloop.core.artifacts import pieces
from devloop.core.money import raised_cap
from devloop.report.render import (
    GREY,
    ROLE_COLOURS,
    STATUS_COLOURS,
)
from devloop.report.render import TEMPLATES as REPORT_TEMPLATES
from devloop.report.render import _environment as report_environment

TEMPLATES = Path(__file__).resolve().parent / "templates"

# Live status -> (fill, stroke): the report's final colours plus the moving ones.
COLOURS = {
    **STATUS_COLOURS,
    "coding": ("#fef9c3", "#ca8a04"),
    "testing": ("#cffafe", "#0891b2"),
    "waiting_model": ("#fce7f3", "#db2777"),
    "review": ("#f3e8ff", "#9333ea"),
    "paused": ("#ffedd5", "#ea580c"),  # a pause of the project stopped its session
}
LEGEND = [("passed", "passed"), ("coding", "coding"), ("testing", "testing"),
          ("review", "waits for review"), ("waiting_model", "waiting for the model"),
          ("blocked", "blocked"), ("blocked_upstream", "blocked upstream"),
          ("paused", "paused"), ("pending", "pending")]
# What must never reach a page, whoever wrote the text: passwords in URLs, API keys.
_SECRETS = [
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*:[^/\s@]*@"), r"\1***@"),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{6,}"), "sk-ant-***"),
    (re.compile(r"(?i)\b(password|passwd|token|secret|api[_-]?key)=([^\s&]+)"), r"\1=***"),
]


def redact(text: str) -> str:
    """Text with anything shaped like a credential replaced by ***."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def colours(status: str) -> tuple[str, str]:
    return COLOURS.get(status, GREY)


def _finalize(value: Any) -> Any:
    """Every printed value: strings redacted (autoescape then escapes them)."""
    return redact(value) if isinstance(value, str) else value


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([
            jinja2.FileSystemLoader(TEMPLATES),
            jinja2.FileSystemLoader(REPORT_TEMPLATES),  # _dag.html.j2, _style.html.j2
        ]),
        undefined=jinja2.StrictUndefined,
        autoescape=True,  # every text from Redis may be model-written: escape it all
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    base = report_environment()
    env.filters.update(base.filters)
    env.filters["raised_cap"] = raised_cap
    env.filters["marks"] = pieces  # a review diff's <U+202E> marks, highlighted
    env.globals.update(
        role_colours=ROLE_COLOURS, status_colours=colours, dag_legend=LEGEND,
        key_param=KEY_PARAM, stored_key=STORED_KEY,
    )
    return env


def render(name: str, **context: Any) -> str:
    """A page or fragment."""
    return environment().get_template(name).render(**context)
