"""Real headless Chromium for the report tests: the DOM after scripts ran, and screenshots."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

# How Chromium runs headless on these machines (as root, closed network).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


@dataclass
class Chromium:
    """One Chromium binary; every call starts a fresh browser with a fresh profile."""

    path: str
    scratch: Path

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        profile = tempfile.mkdtemp(prefix="profile-", dir=self.scratch)
        done = subprocess.run(
            [self.path, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-3000:]}"
        return done

    def dump_dom(self, page: Path, fragment: str = "") -> str:
        """The serialized DOM of a local page after its scripts ran."""
        url = page.resolve().as_uri() + fragment
        return self._run("--virtual-time-budget=2000", "--dump-dom", url).stdout

    def screenshot(self, page: Path, out: Path, width: int = 1400, height: int = 1800) -> Path:
        """A PNG of the page's first width x height pixels."""
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        self._run(
            f"--screenshot={out.resolve()}",
            f"--window-size={width},{height}",
            page.resolve().as_uri(),
        )
        return out


class Elements(HTMLParser):
    """Every start tag of a document with its attributes, in order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def having(self, attr: str) -> list[dict[str, str | None]]:
        """Attributes of every element that has attr."""
        return [a for _, a in self.tags if attr in a]

    def named(self, tag: str) -> list[dict[str, str | None]]:
        """Attributes of every element with this tag name."""
        return [a for t, a in self.tags if t == tag]
