r"""World info regex keys: JavaScript regular expressions, run by Python's ``re``.

SillyTavern treats a key written ``/pattern/flags`` as ``new RegExp(pattern,
flags)`` when it parses (``parseRegexFromString``): the whole key must match
``^/([\w\W]+?)/([gimsuy]*)$``, the pattern may not hold an unescaped ``/``,
and a pattern or flags that ``RegExp`` rejects leave the key a plain-text key.
The regex is tested on the scanned text as it is (never lower-cased).

:func:`compile_key` translates the pattern into a Python regex with the same
meaning, where the two dialects differ:

* ``\d``, ``\w``, ``\b`` (and ``\D``, ``\W``, ``\B``) are ASCII-only in
  JavaScript; ``\s`` is JavaScript's white space list;
* ``.`` stops at ``\n``, ``\r``, U+2028 and U+2029 (unless ``s``); ``^`` and
  ``$`` are the text's ends, or with ``m`` also around those four characters
  (Python's ``$`` would also match before a final ``\n``);
* ``(?<name>…)`` and ``\k<name>`` are named groups; ``[^]`` is any character
  and ``[]`` none; a ``{`` that is not a quantifier, a lone ``]`` or ``}``,
  and escapes of ordinary characters (``\A``, ``\Z``, ``\/``) are literal;
* syntax that JavaScript rejects (``(?i)``, ``(?P<n>…)``, ``a**``, a
  quantifier with nothing before it) makes the key plain text, as in
  SillyTavern; flag ``y`` anchors the match at the start of the text.

Anything this translation cannot express in Python (a lookbehind of varying
width, ``\p{…}``) is reported as not translatable (:class:`Untranslatable`);
the tests check every construct above against a JavaScript engine.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_KEY = re.compile(r"^/([\s\S]+?)/([gimsuy]*)$")
_UNESCAPED_SLASH = re.compile(r"(^|[^\\])/")
_LINE_ENDS = "\\n\\r\\u2028\\u2029"
_WORD = "A-Za-z0-9_"
_DIGIT = "0-9"
# JavaScript's \s: WhiteSpace and LineTerminator code points.
_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_BOUNDARY = f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))"
_NOT_BOUNDARY = f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))"
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")


class JsSyntaxError(ValueError):
    """JavaScript's ``RegExp`` would reject this pattern or these flags."""


class Untranslatable(ValueError):
    """A valid JavaScript pattern that Python's ``re`` cannot express."""


@dataclass(frozen=True, slots=True)
class JsRegex:
    """A key's regex: the Python translation and whether it only matches at the start."""

    regex: re.Pattern[str]
    sticky: bool

    def test(self, text: str) -> bool:
        """``RegExp.prototype.test`` on a fresh regex (``lastIndex`` 0)."""
        if self.sticky:
            return self.regex.match(text) is not None
        return self.regex.search(text) is not None


def split_key(key: str) -> tuple[str, str] | None:
    """``(pattern, flags)`` of a key SillyTavern reads as a regex, else ``None``."""
    found = _KEY.match(key)
    if found is None:
        return None
    pattern, flags = found.group(1), found.group(2)
    if _UNESCAPED_SLASH.search(pattern):
        return None
    return pattern.replace("\\/", "/", 1), flags  # JS String.replace: the first one only


@functools.lru_cache(maxsize=4096)
def compile_key(key: str) -> JsRegex | None:
    """The regex of a ``/pattern/flags`` key; ``None`` for a key SillyTavern takes as text.

    Raises :class:`Untranslatable` for the rare valid pattern Python cannot run.
    """
    parts = split_key(key)
    if parts is None:
        return None
    pattern, flags = parts
    if len(set(flags)) != len(flags):
        return None  # RegExp rejects repeated flags
    try:
        source = _Translator(pattern, flags).translate()
    except JsSyntaxError:
        return None
    try:
        regex = re.compile(source, re.IGNORECASE if "i" in flags else 0)
    except re.error as exc:
        raise Untranslatable(f"{key}: {exc}") from None
    return JsRegex(regex, "y" in flags)


class _Translator:
    """A one-pass translation of a JavaScript pattern (see the module docstring)."""

    def __init__(self, pattern: str, flags: str) -> None:
        self.src = pattern
        self.dotall = "s" in flags
        self.multiline = "m" in flags
        self.unicode = "u" in flags
        self.at = 0
        self.groups = _count_groups(pattern)
        self.names = set(re.findall(r"\(\?<([A-Za-z_$][\w$]*)>", pattern))
        self.opened = 0  # capturing groups opened so far
        self.stack: list[int | None] = []  # per open group: its number (None: not capturing)
        self.closed: set[str] = set()  # numbers and names of the groups closed so far
        self.group_names: dict[int, str] = {}

    def translate(self) -> str:
        out: list[str] = []
        can_repeat = False
        depth = 0
        while self.at < len(self.src):
            c = self.src[self.at]
            if c in "*+?" or (c == "{" and _QUANTIFIER.match(self.src, self.at)):
                if not can_repeat:
                    raise JsSyntaxError("nothing to repeat")
                out.append(self._quantifier())
                can_repeat = False
                continue
            self.at += 1
            can_repeat = True
            if c == "\\":
                piece, can_repeat = self._escape()
                out.append(piece)
            elif c == "[":
                out.append(self._class())
            elif c == "(":
                out.append(self._group_open())
                depth += 1
                can_repeat = False
            elif c == ")":
                if depth == 0:
                    raise JsSyntaxError("unmatched )")
                depth -= 1
                number = self.stack.pop()
                if number is not None:
                    self.closed.add(str(number))
                    self.closed.add(self.group_names.get(number, ""))
                out.append(")")
            elif c == "|":
                out.append("|")
                can_repeat = False
            elif c == ".":
                out.append("(?s:.)" if self.dotall else f"[^{_LINE_ENDS}]")
            elif c == "^":
                out.append(f"(?:\\A|(?<=[{_LINE_ENDS}]))" if self.multiline else "\\A")
                can_repeat = False
            elif c == "$":
                out.append(f"(?:\\Z|(?=[{_LINE_ENDS}]))" if self.multiline else "\\Z")
                can_repeat = False
            else:  # "{", "}" and "]" that are no syntax here are literal (Annex B)
                if self.unicode and c in "{}]":
                    raise JsSyntaxError(f"lone {c} in a unicode regex")
                out.append(re.escape(c))
        if depth:
            raise JsSyntaxError("unterminated group")
        return "".join(out)

    def _quantifier(self) -> str:
        c = self.src[self.at]
        if c == "{":
            found = _QUANTIFIER.match(self.src, self.at)
            assert found is not None
            low, comma, high = found.group(1), found.group(2), found.group(3)
            if high and int(high) < int(low):
                raise JsSyntaxError("numbers out of order in {} quantifier")
            text = found.group(0) if comma is None or high else "{" + low + ",}"
            self.at = found.end()
        else:
            text = c
            self.at += 1
        if self.src[self.at : self.at + 1] == "?":
            text += "?"
            self.at += 1
        nxt = self.src[self.at : self.at + 1]
        if nxt in ("*", "+", "?") or (nxt == "{" and _QUANTIFIER.match(self.src, self.at)):
            raise JsSyntaxError("nothing to repeat")
        return text

    def _group_open(self) -> str:
        rest = self.src[self.at :]
        if not rest.startswith("?"):
            self.opened += 1
            self.stack.append(self.opened)
            return "("
        for js in ("?:", "?=", "?!", "?<=", "?<!"):  # the same in Python
            if rest.startswith(js):
                self.at += len(js)
                self.stack.append(None)
                return "(" + js
        named = re.match(r"\?<([A-Za-z_$][\w$]*)>", rest)
        if named and "$" not in named.group(1):
            self.at += named.end()
            self.opened += 1
            self.stack.append(self.opened)
            self.group_names[self.opened] = named.group(1)
            return f"(?P<{named.group(1)}>"
        raise JsSyntaxError("invalid group")

    def _escape(self) -> tuple[str, bool]:
        """The escape after a backslash (outside a class); and whether it can be repeated."""
        if self.at >= len(self.src):
            raise JsSyntaxError("\\ at end of pattern")
        c = self.src[self.at]
        self.at += 1
        simple = {
            "d": f"[{_DIGIT}]",
            "D": f"[^{_DIGIT}]",
            "w": f"[{_WORD}]",
            "W": f"[^{_WORD}]",
            "s": f"[{_SPACE}]",
            "S": f"[^{_SPACE}]",
        }
        if c in simple:
            return simple[c], True
        if c == "b":
            return _BOUNDARY, False
        if c == "B":
            return _NOT_BOUNDARY, False
        if c == "k" and (self.names or self.unicode):
            name = re.match(r"<([A-Za-z_$][\w$]*)>", self.src[self.at :])
            if not name or name.group(1) not in self.names:
                raise JsSyntaxError("invalid named reference")
            self.at += name.end()
            return self._reference(name.group(1), f"(?P={name.group(1)})"), True
        if c.isdigit() and c != "0":
            digits = re.match(r"\d*", self.src[self.at :])
            assert digits is not None
            number = c + digits.group(0)
            if int(number) <= self.groups:
                self.at += len(digits.group(0))
                return self._reference(number, f"\\{number}"), True
            if self.unicode:
                raise JsSyntaxError("invalid escape")
            return self._legacy_octal(c), True
        return self._char_escape(c), True

    def _reference(self, group: str, python: str) -> str:
        """A back reference: JavaScript matches the empty string for a group that has not
        captured (not closed yet, or not taken part); Python would fail there."""
        if group not in self.closed:
            return "(?:)"
        return f"(?({group}){python}|)"

    def _legacy_octal(self, first: str) -> str:
        """``\\N`` that is no back reference: an octal escape, or a literal 8 / 9 (Annex B)."""
        if first in "89":
            return first
        octal = re.match(r"[0-7]{0,2}", self.src[self.at :])
        assert octal is not None
        digits = first + octal.group(0)
        if int(digits, 8) > 0o377:
            digits = digits[:2]
        self.at += len(digits) - 1
        return re.escape(chr(int(digits, 8)))

    def _char_escape(self, c: str, in_class: bool = False) -> str:
        """An escape that stands for one character (also valid inside a class)."""
        controls = {"f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
        if c in controls:
            return re.escape(controls[c])
        if c == "0" and not self.src[self.at : self.at + 1].isdigit():
            return "\\x00"
        if c == "0":
            return self._legacy_octal("0")
        if c == "x":
            hexa = re.match(r"[0-9A-Fa-f]{2}", self.src[self.at :])
            if hexa:
                self.at += 2
                return re.escape(chr(int(hexa.group(0), 16)))
        if c == "u":
            if self.unicode and self.src[self.at : self.at + 1] == "{":
                code = re.match(r"\{([0-9A-Fa-f]+)\}", self.src[self.at :])
                if not code or int(code.group(1), 16) > 0x10FFFF:
                    raise JsSyntaxError("invalid unicode escape")
                self.at += code.end()
                return re.escape(chr(int(code.group(1), 16)))
            hexa = re.match(r"[0-9A-Fa-f]{4}", self.src[self.at :])
            if hexa:
                self.at += 4
                return re.escape(chr(int(hexa.group(0), 16)))
        if c == "c":
            letter = self.src[self.at : self.at + 1]
            if letter.isascii() and letter.isalpha():
                self.at += 1
                return re.escape(chr(ord(letter) % 32))
            return "\\\\"  # "\c" without a letter is a backslash and a "c" (Annex B)
        if c in "pP" and self.unicode:
            raise Untranslatable("\\p{…} property escapes")
        if self.unicode and c not in ("^$\\.*+?()[]{}|/-" if in_class else "^$\\.*+?()[]{}|/"):
            raise JsSyntaxError("invalid escape in a unicode regex")
        return re.escape(c)  # an identity escape: the character itself

    def _class(self) -> str:
        """A ``[…]`` class, up to its closing ``]``."""
        negated = self.src[self.at : self.at + 1] == "^"
        if negated:
            self.at += 1
        items: list[str] = []  # Python class items
        extra: list[str] = []  # \D \W \S inside a class: alternatives of their own
        prev_char: str | None = None  # the previous single character, for a range
        while True:
            if self.at >= len(self.src):
                raise JsSyntaxError("unterminated character class")
            c = self.src[self.at]
            self.at += 1
            if c == "]":
                break
            if (
                c == "-"
                and prev_char is not None
                and self.src[self.at : self.at + 1] not in ("]", "")
            ):
                end = self._class_atom()
                if end is None or len(end[1]) != 1:
                    if self.unicode:
                        raise JsSyntaxError("invalid class range")
                    items.append("\\-")  # Annex B: "-" next to a class escape is literal
                    if end is not None:
                        self._add_atom(end, items, extra)
                    prev_char = None
                    continue
                if ord(end[1]) < ord(prev_char):
                    raise JsSyntaxError("range out of order in character class")
                items[-1] = f"{re.escape(prev_char)}-{re.escape(end[1])}"
                prev_char = None
                continue
            self.at -= 1
            atom = self._class_atom()
            assert atom is not None
            self._add_atom(atom, items, extra)
            prev_char = atom[1] if len(atom[1]) == 1 and atom[0] == "char" else None
        inner = "".join(items)
        if not extra:
            if not inner:
                return "(?s:.)" if negated else "(?!)"
            return f"[{'^' if negated else ''}{inner}]"
        union = "|".join(([f"[{inner}]"] if inner else []) + extra)
        return f"(?:(?!{union})(?s:.))" if negated else f"(?:{union})"

    def _class_atom(self) -> tuple[str, str] | None:
        """``("char", c)`` for one character, ``("set", items)`` for a class escape."""
        c = self.src[self.at]
        self.at += 1
        if c != "\\":
            return "char", c
        if self.at >= len(self.src):
            raise JsSyntaxError("\\ at end of pattern")
        e = self.src[self.at]
        self.at += 1
        sets = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
        if e in sets:
            return "set", sets[e]
        if e in "DWS":
            return "negset", sets[e.lower()]
        if e == "b":
            return "char", "\b"
        if e == "-":
            return "char", "-"
        if e.isdigit() and e != "0":
            if self.unicode:
                raise JsSyntaxError("invalid class escape")
            self.at -= 1
            return "char", _unescape(self._legacy_octal_in_class())
        return "char", _unescape(self._char_escape(e, in_class=True))

    def _legacy_octal_in_class(self) -> str:
        first = self.src[self.at]
        self.at += 1
        return self._legacy_octal(first)

    @staticmethod
    def _add_atom(atom: tuple[str, str], items: list[str], extra: list[str]) -> None:
        kind, value = atom
        if kind == "set":
            items.append(value)
        elif kind == "negset":
            extra.append(f"[^{value}]")
        else:
            items.append(re.escape(value) if value not in "-" else "\\-")


def _unescape(piece: str) -> str:
    """The one character a ``re.escape``-d piece (or ``\\x00``) stands for."""
    if piece == "\\x00":
        return "\x00"
    if piece == "\\\\":
        return "\\"
    return piece[1:] if piece.startswith("\\") and len(piece) == 2 else piece


def _count_groups(pattern: str) -> int:
    """Capturing groups in a pattern: ``(`` not escaped, not in a class, not ``(?``."""
    count, at, in_class = 0, 0, False
    while at < len(pattern):
        c = pattern[at]
        if c == "\\":
            at += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            opener = pattern[at + 1 : at + 4]
            named = opener[:2] == "?<" and opener not in ("?<=", "?<!")
            count += not opener.startswith("?") or named
        at += 1
    return count
