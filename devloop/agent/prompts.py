"""Render the role prompts in prompts/*.md (jinja2, StrictUndefined: a missing variable fails)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from devloop.agent.untrusted import wrap_untrusted
from devloop.project.resources import data_dir

PROMPTS_DIR = data_dir("prompts")


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(PROMPTS_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # prompts are markdown for a model, not HTML
    )
    # `{{ text | untrusted(label) }}`: text a model or code under test wrote, fenced as data.
    env.filters["untrusted"] = lambda text, label: wrap_untrusted(label, str(text).rstrip("\n"))
    return env


def render(name: str, **context: Any) -> str:
    """The prompt `prompts/{name}.md` rendered with context."""
    return _environment().get_template(f"{name}.md").render(**context)
