"""Where DevLoop's data files are: prompts/, toolchains/ and examples/.

A wheel (`pip install .`, pipx, the image) carries them inside the package as
`devloop/_data/<name>` (pyproject.toml's force-include); a checkout, or its editable
install, has them beside the package at the repository's root.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
DATA = ("prompts", "toolchains", "examples")


def data_dir(name: str) -> Path:
    """The directory of one kind of data file, installed or in the checkout."""
    if name not in DATA:
        raise ValueError(f"no data dir {name!r}; there are {', '.join(DATA)}")
    installed = PACKAGE / "_data" / name
    return installed if installed.is_dir() else PACKAGE.parent / name
