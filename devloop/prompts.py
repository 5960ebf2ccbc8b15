"""Render the role prompts in prompts/*.md (jinja2, StrictUndefined: a missing variable fails)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(PROMPTS_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # prompts are markdown for a model, not HTML
    )


def render(name: str, **context: Any) -> str:
    """The prompt `prompts/{name}.md` rendered with context."""
    return _environment().get_template(f"{name}.md").render(**context)
