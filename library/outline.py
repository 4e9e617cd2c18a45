"""What the server counts in a document exactly, where a small model cannot: in a source file
whose language Pygments knows, the functions and classes it defines; in any other document, its
sections (the passages' headings). A question about the whole document gets this outline first,
before the model's notes of its parts (whole_document.py), and where the question asks only what
the outline counts or lists ("how many functions does it define", "list the sections"), the
outline alone: it is answered from the server's count, not from a small model adding up notes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pygments.lexers import get_lexer_for_filename
from pygments.token import Keyword, Name
from pygments.util import ClassNotFound

from store import FoundPassage

# Keywords after which the next name is a definition, for lexers that mark it as a plain name
# (JavaScript's `function f`, Go's `func f`): Python, C, Java and Rust mark it themselves.
_DEFINES_FUNCTION = {"def", "function", "func", "fn", "fun", "sub", "proc"}
_DEFINES_CLASS = {"class", "struct", "interface", "trait", "enum", "type"}
# A question that asks for a count or list of what an outline holds, and nothing more ("how many
# functions does app.py define", "list the sections"; not "how many functions handle refunds").
_COUNTS = re.compile(
    r"^\W*(?:how many|count|list|name)(?:\s+(?:all|every|each|of|the))*\s+"
    r"(?P<kind>functions?|methods?|class(?:es)?|sections?|chapters?|headings?)"
    r"(?:\s+(?:are|is|there|does|do|in|of|it|its|this|that|the|file|document|module|code|have|has|defined?|defines|contains?|[\w-]+\.\w+))*"
    r"\s*[.?!]?\s*$", re.IGNORECASE)
# The names listed with a count: enough to check it and to answer "list them", within a note's room.
LISTED_CHARACTERS = 2_000


@dataclass(frozen=True)
class Outline:
    name: str
    functions: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()

    def answers(self, question: str) -> bool:
        """Whether ``question`` asks only what this outline counts or lists."""
        asked = _COUNTS.match(question.strip())
        if asked is None:
            return False
        kind = asked["kind"].lower()
        if kind.startswith(("function", "method", "class")):
            return bool(self.functions or self.classes)
        return bool(self.sections)

    def for_model(self) -> str:
        if self.functions or self.classes:
            counted = (f"{self.name} defines exactly {len(self.functions)} function{_s(self.functions)} "
                       f"and {len(self.classes)} class{'es' if len(self.classes) != 1 else ''}")
            lists = [_listed("Functions", self.functions), _listed("Classes", self.classes)]
        else:
            counted = f"{self.name} has exactly {len(self.sections)} section{_s(self.sections)}"
            lists = [_listed("Sections, in order", self.sections)]
        return "\n".join([f"Outline, counted by the server: {counted}.", *(listed for listed in lists if listed)])


def outline(name: str, passages: Sequence[FoundPassage]) -> Outline | None:
    """The document's outline from its passages in order; None where it has neither definitions nor headings."""
    functions, classes = _definitions(name, "\n\n".join(passage.text for passage in passages))
    if functions or classes:
        return Outline(name, functions=functions, classes=classes)
    sections: list[str] = []
    for passage in passages:
        if passage.heading and (not sections or sections[-1] != passage.heading):
            sections.append(passage.heading)
    return Outline(name, sections=tuple(sections)) if sections else None


def _definitions(name: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of the functions and classes ``text`` defines, in order, where ``name`` is a source file's."""
    try:
        lexer = get_lexer_for_filename(name, stripnl=False)
    except ClassNotFound:
        return (), ()
    functions: list[str] = []
    classes: list[str] = []
    defining = None
    for kind, value in lexer.get_tokens(text):
        if kind in Name.Function or (defining is functions and kind in Name):
            functions.append(value)
        elif kind in Name.Class or (defining is classes and kind in Name):
            classes.append(value)
        if kind in Keyword:
            defining = functions if value in _DEFINES_FUNCTION else classes if value in _DEFINES_CLASS else None
        elif value.strip():
            defining = None
    return tuple(functions), tuple(classes)


def _listed(title: str, names: Sequence[str]) -> str:
    if not names:
        return ""
    shown: list[str] = []
    for name in names:
        if sum(len(each) + 2 for each in shown) + len(name) > LISTED_CHARACTERS:
            return f"{title}: {', '.join(shown)}, and {len(names) - len(shown)} more."
        shown.append(name)
    return f"{title}: {', '.join(shown)}."


def _s(names: Sequence[str]) -> str:
    return "s" if len(names) != 1 else ""
