"""Is a text the start of some JSON document? What a JSON grammar guarantees of an answer that
max_tokens cut: every character it has is one the grammar allowed, even if the value never closed."""

from __future__ import annotations

import re

_WS = " \t\n\r"
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
#: What a number cut by the end of the text may be: the start of a valid one.
_NUMBER_START = re.compile(r"-|-?(0|[1-9][0-9]*)(\.|\.[0-9]+([eE][+-]?[0-9]*)?|[eE][+-]?[0-9]*)?")
_ESCAPES = '"\\/bfnrt'
_HEX = "0123456789abcdefABCDEF"


class _End(Exception):
    """The text ran out inside a value that was valid so far."""


class _Invalid(Exception):
    """A character no JSON document has there."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def peek(self) -> str:
        if self.pos >= len(self.text):
            raise _End
        return self.text[self.pos]

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WS:
            self.pos += 1

    def expect(self, char: str) -> None:
        self.skip_ws()
        if self.peek() != char:
            raise _Invalid
        self.pos += 1

    def value(self) -> None:
        self.skip_ws()
        c = self.peek()
        if c in "{[":
            self.container(c)
        elif c == '"':
            self.string()
        elif c == "-" or c.isdigit():
            self.number()
        else:
            self.literal()

    def container(self, opener: str) -> None:
        closer = "}" if opener == "{" else "]"
        self.pos += 1
        self.skip_ws()
        if self.peek() == closer:
            self.pos += 1
            return
        while True:
            if opener == "{":
                self.skip_ws()
                if self.peek() != '"':
                    raise _Invalid
                self.string()
                self.expect(":")
            self.value()
            self.skip_ws()
            c = self.peek()
            self.pos += 1
            if c == closer:
                return
            if c != ",":
                raise _Invalid

    def string(self) -> None:
        self.pos += 1  # the opening quote
        while True:
            c = self.peek()
            self.pos += 1
            if c == '"':
                return
            if c == "\\":
                esc = self.peek()
                self.pos += 1
                if esc == "u":
                    for _ in range(4):
                        if self.peek() not in _HEX:
                            raise _Invalid
                        self.pos += 1
                elif esc not in _ESCAPES:
                    raise _Invalid
            elif ord(c) < 0x20:
                raise _Invalid

    def number(self) -> None:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in "+-.eE0123456789":
            self.pos += 1
        if self.pos == len(self.text):
            if _NUMBER_START.fullmatch(self.text, start):
                raise _End  # a number that may still be growing
            raise _Invalid
        if not _NUMBER.fullmatch(self.text, start, self.pos):
            raise _Invalid

    def literal(self) -> None:
        for word in ("true", "false", "null"):
            have = self.text[self.pos : self.pos + len(word)]
            if have == word:
                self.pos += len(word)
                return
            if have and word.startswith(have) and self.pos + len(have) == len(self.text):
                raise _End
        raise _Invalid


def is_json_prefix(text: str) -> bool:
    """True when ``text`` is a whole JSON document or the start of one (whitespace around it allowed)."""
    reader = _Reader(text)
    try:
        reader.value()
        reader.skip_ws()
        return reader.pos == len(text)
    except _End:
        return True
    except _Invalid:
        return False
