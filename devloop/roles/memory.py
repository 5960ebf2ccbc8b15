"""Memory notes a session starts with: the project's, the company's, the unit's own, ranked
by relevance to the unit spec. Pure ranking over what the store returns.

Where notes come from: the project's memory folder (imported with it), notes promoted
when one of its units passed, notes this unit's own earlier sessions wrote, and the
company's memory: notes promoted by the passed units of every project of the same
company in the same Redis (`devloop:@company:{cid}:memory`).

The ranking is BM25 (k1 = 1.2, b = 0.75) of each note's topic and content against the
unit spec (unit id, kind, stack, SDD section, acceptance criteria), over the candidate
notes as the corpus, with the words of `coverage.words` (lower-cased, stemmed, stop
words out). Notes that share no word with the spec are left out; ties go to the note's
own relevance (what its author declared), then its name. The top five are shown, with
their score scaled so the best is 1.00.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from devloop.core.ids import is_valid_id
from devloop.roles.coverage import words

TOP = 5
K1, B = 1.2, 0.75
_FRONT = re.compile(r"\A---\n(.*?)\n---\n?(.*)\Z", re.S)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Note:
    """One note: its name, topic, body, declared relevance and who wrote it."""

    name: str
    topic: str
    content: str
    declared: float
    source: str


def parse(name: str, text: str, role: str, where: str, project: str | None = None) -> Note:
    """A note's front matter and body, and a label naming its origin.

    `where` is "own" (this unit's pending note), "project" or "company"; the author
    lines are the store's (it writes them first when it promotes a note).
    """
    topic, declared, body = name.removesuffix(".md"), 0.5, text
    author: dict[str, str] = {}
    match = _FRONT.match(text)
    if match:
        body = match.group(2)
        for line in match.group(1).splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "topic":
                topic = value
            elif key == "relevance":
                with contextlib.suppress(ValueError):
                    declared = min(1.0, max(0.0, float(value)))
            elif key in ("author_unit", "author_project") and is_valid_id(value):
                author.setdefault(key, value)
    unit, origin = author.get("author_unit"), author.get("author_project") or project
    if where == "own":
        source = f"memory note by an earlier {role} session of this unit"
    elif where == "company" and unit and origin:
        source = f"memory note by the {role} of unit {unit} in project {origin}"
    elif unit:
        source = f"memory note by the {role} of unit {unit}"
    else:
        source = "memory note from the project's memory folder"
    return Note(name, topic, body.strip(), declared, source)


def _terms(text: str) -> list[str]:
    """The text's words with repeats (BM25 counts them)."""
    out: list[str] = []
    for token in _TOKEN.findall(re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)):
        out += sorted(words(token))
    return out


def rank(notes: list[Note], spec: str, top: int = TOP) -> list[dict[str, Any]]:
    """The top notes by BM25 against the spec: {topic, relevance, content, source}."""
    query = set(_terms(spec))
    docs = [Counter(_terms(f"{n.topic} {n.content}")) for n in notes]
    if not docs or not query:
        return []
    average = sum(sum(d.values()) for d in docs) / len(docs) or 1.0
    df = Counter(term for d in docs for term in set(d) if term in query)
    scored = []
    for note, doc in zip(notes, docs, strict=True):
        length = sum(doc.values())
        score = 0.0
        for term in query & set(doc):
            idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
            tf = doc[term]
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        if score > 0:
            scored.append((score, note))
    scored.sort(key=lambda pair: (-round(pair[0], 9), -pair[1].declared, pair[1].name))
    best = scored[0][0] if scored else 1.0
    return [
        {
            "topic": note.topic,
            "relevance": round(score / best, 2),
            "content": note.content,
            "source": note.source,
        }
        for score, note in scored[:top]
    ]
