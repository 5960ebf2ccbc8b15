"""SDD HTML: find each `<section data-unit-id>` with its contract and acceptance list.

Pure: takes HTML text, returns what it found, and leaves judging it to the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class SddSection:
    """One unit's section of an SDD file, as written."""

    unit_id: str
    file: str
    line: int
    html: str = ""
    contract_text: str | None = None
    acceptance: list[str] = field(default_factory=list)


@dataclass
class _Open:
    """A section being read: where it started and how deep the parser is inside it."""

    section: SddSection
    start: int
    depth: int = 0


class _SectionParser(HTMLParser):
    """Walks the HTML once, collecting sections, their contract `<pre>` and `<li>` items."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text = text
        self.file = file
        self.line_starts = _line_starts(text)
        self.sections: list[SddSection] = []
        self.current: _Open | None = None
        self.in_contract = False
        self.contract_parts: list[str] = []
        self.in_acceptance = False
        self.item_parts: list[str] | None = None

    def _offset(self) -> int:
        line, col = self.getpos()
        return self.line_starts[line - 1] + col

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if self.current is None:
            if tag == "section" and attr.get("data-unit-id"):
                unit_id = (attr["data-unit-id"] or "").strip()
                section = SddSection(unit_id=unit_id, file=self.file, line=self.getpos()[0])
                self.current = _Open(section=section, start=self._offset())
            return
        first_contract = self.current.section.contract_text is None
        if tag == "section":
            self.current.depth += 1
        elif tag == "pre" and "data-contract" in attr and first_contract:
            self.in_contract = True
            self.contract_parts = []
        elif tag == "ul" and "data-acceptance" in attr:
            self.in_acceptance = True
        elif tag == "li" and self.in_acceptance:
            self.item_parts = []

    def handle_endtag(self, tag: str) -> None:
        if self.current is None:
            return
        section = self.current.section
        if tag == "pre" and self.in_contract:
            self.in_contract = False
            section.contract_text = "".join(self.contract_parts)
        elif tag == "li" and self.item_parts is not None:
            item = " ".join("".join(self.item_parts).split())
            if item:
                section.acceptance.append(item)
            self.item_parts = None
        elif tag == "ul" and self.in_acceptance:
            self.in_acceptance = False
        elif tag == "section":
            if self.current.depth:
                self.current.depth -= 1
                return
            end = self.text.find(">", self._offset()) + 1
            section.html = self.text[self.current.start : end]
            self.sections.append(section)
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.in_contract:
            self.contract_parts.append(data)
        elif self.item_parts is not None:
            self.item_parts.append(data)


_NEWLINE = re.compile("\n")


def _line_starts(text: str) -> list[int]:
    """Offsets where each line begins, so parser positions map to text offsets."""
    return [0, *(m.end() for m in _NEWLINE.finditer(text))]


def parse_sections(text: str, file: str) -> list[SddSection]:
    """Every complete `<section data-unit-id>` in an SDD file, in document order."""
    parser = _SectionParser(text, file)
    parser.feed(text)
    parser.close()
    return parser.sections


def section_document(section: SddSection) -> str:
    """A standalone HTML file holding only this section (what a session may read)."""
    return (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{section.unit_id}</title></head>\n<body>\n{section.html}\n</body></html>\n"
    )
