"""SDD parsing with a real HTML parser."""

import json

from devloop.core.sdd import parse_sections, section_document

HTML = """<!doctype html>
<html><body>
<section data-unit-id="a">
  <h2>A</h2>
  <pre data-contract>{"exports": {"q": "&lt;b&gt; &amp; \\"c\\""}}</pre>
  <ul data-acceptance>
    <li>first   criterion
        over two lines</li>
    <li><b>second</b> one</li>
  </ul>
  <section><p>nested section without an id</p></section>
  <ul><li>not acceptance</li></ul>
</section>
<section data-unit-id="b"><p>no contract here</p></section>
</body></html>
"""


def test_sections_contract_and_acceptance_are_found() -> None:
    sections = parse_sections(HTML, "sdd/mvcp/x.html")
    assert [s.unit_id for s in sections] == ["a", "b"]
    a, b = sections
    assert json.loads(a.contract_text or "") == {"exports": {"q": '<b> & "c"'}}
    assert a.acceptance == ["first criterion over two lines", "second one"]
    assert a.line == 3 and a.file == "sdd/mvcp/x.html"
    assert b.contract_text is None and b.acceptance == []


def test_section_html_is_the_exact_source_span() -> None:
    a, b = parse_sections(HTML, "x.html")
    assert a.html.startswith('<section data-unit-id="a">')
    assert a.html.endswith("<ul><li>not acceptance</li></ul>\n</section>")
    assert "unit-id=\"b\"" not in a.html
    assert b.html == '<section data-unit-id="b"><p>no contract here</p></section>'


def test_section_document_holds_only_its_section() -> None:
    a, _ = parse_sections(HTML, "x.html")
    doc = section_document(a)
    assert parse_sections(doc, "x.html")[0].acceptance == a.acceptance
    assert "no contract here" not in doc
