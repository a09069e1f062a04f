"""Ranked chat search: BM25 over floors, with tokens that work for CJK and for words.

Tokens are lower-cased. A run of Chinese, Japanese or Korean characters
becomes its character bigrams (a lone character stays a unigram), since these
scripts do not separate words with spaces; everything else splits into words
of letters and digits. A one-character CJK query term matches every indexed
bigram that contains it.

The index is built once per loaded chat (inverted lists of ``(floor, tf)``)
and answers a query in time proportional to the matching postings. Building
it keeps per-token work in C (``str.translate`` / ``re.findall`` to tokenise,
``map`` over ``list.append`` to collect, ``Counter`` per term for the term
frequencies); :mod:`tavern_agent.chat.index_store` saves it beside the chat
mount so later runs load it instead. Until a run's index is ready,
:class:`ChatScan` answers the same queries by scanning the floors' text with RE2.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import operator
import re
import string
from abc import ABC, abstractmethod
from array import array
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Protocol

import re2

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_WORD = re.compile(rf"[^\W_{_CJK}]+")
_HAS_CJK = re.compile(rf"[{_CJK}]")
K1 = 1.2
B = 0.75
_STEP = 512  # texts indexed between two progress updates (and checkpoints): a few ms


class Tally(Protocol):
    """Where a build counts the floors it indexed (a ``chat.progress.BuildProgress``)."""

    done: int

    def checkpoint(self) -> None:
        """Called between steps: the build may wait here while a scan runs."""
        ...


class Pausable(Protocol):
    """A build a scan can hold still while it runs (a ``chat.progress.BuildProgress``)."""

    def paused(self) -> AbstractContextManager[None]:
        """The build waits at its next checkpoint until the block ends."""
        ...


@dataclass(frozen=True, slots=True)
class Doc:
    """What the index needs of a floor."""

    text: str
    role: str
    hidden: bool


# For ASCII text: upper case folded, every other character that is not a letter or digit a
# space; splitting the result gives what ``_WORD`` finds in the lower-cased text, but faster.
_ASCII_WORDS = str.maketrans(
    {c: " " for c in map(chr, range(128)) if not c.isalnum()}
    | {c: c.lower() for c in string.ascii_uppercase}
)


def _is_cjk(token: str) -> bool:
    return _HAS_CJK.match(token) is not None


def tokenize(text: str) -> list[str]:
    """Lower-cased words, and character bigrams for CJK runs."""
    if text.isascii():
        return text.translate(_ASCII_WORDS).split()
    text = text.lower()
    if _HAS_CJK.search(text) is None:
        return _WORD.findall(text)
    out: list[str] = []
    for token in _TOKEN.findall(text):
        if len(token) > 1 and _is_cjk(token):
            out.extend(map(operator.add, token, token[1:]))
        else:
            out.append(token)
    return out


@dataclass(frozen=True, slots=True)
class Hit:
    """One search match: the chat floor, its score, and the query term its snippet centres on."""

    floor: int
    score: float
    term: str  # the query term to centre the snippet on


class Searcher(ABC):
    """A ranked chat search by BM25: a :class:`ChatIndex` or a :class:`ChatScan`.

    The two score alike; they differ in how they find the floors holding a term
    (:meth:`_matches`) and in what they take as a floor's length.
    """

    avgdl: float  # the mean floor length

    @abstractmethod
    def __len__(self) -> int:
        """How many floors are searched."""

    @abstractmethod
    def _matches(self, query: str) -> Iterator[tuple[str, Collection[int], Iterable[int]]]:
        """Each term ``query`` stands for, with the floors that hold it and how often."""

    @abstractmethod
    def _lengths(self) -> Sequence[int]:
        """Each floor's length, in the unit of :attr:`avgdl`."""

    @abstractmethod
    def _floor(self, floor: int) -> tuple[str, bool]:
        """A floor's role and whether it is hidden."""

    def _quiet(self) -> AbstractContextManager[None]:
        """What a search holds while it runs: nothing (a scan holds the index build still)."""
        return contextlib.nullcontext()

    def search(
        self,
        query: str,
        *,
        limit: int,
        end: int,
        start: int = 0,
        role: str | None = None,
        hidden: bool | None = None,
    ) -> list[Hit]:
        """The best ``limit`` floors in ``start…end-1``; newer floors win ties.

        Whatever :meth:`_quiet` holds is held meanwhile.
        """
        n = len(self)
        if n == 0:
            return []
        with self._quiet():
            scores: dict[int, float] = {}
            best: dict[int, tuple[float, str]] = {}
            avgdl = self.avgdl or 1.0
            lengths = self._lengths()
            for term, floors, tfs in self._matches(query):
                df = len(floors)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                for floor, tf in zip(floors, tfs, strict=True):
                    if floor < start or floor >= end:
                        continue
                    norm = K1 * (1 - B + B * lengths[floor] / avgdl)
                    part = idf * tf * (K1 + 1) / (tf + norm)
                    scores[floor] = scores.get(floor, 0.0) + part
                    if part > best.get(floor, (0.0, ""))[0]:
                        best[floor] = (part, term)

            def keep(floor: int) -> bool:
                floor_role, floor_hidden = self._floor(floor)
                return (role is None or floor_role == role) and (
                    hidden is None or floor_hidden == hidden
                )

            return _ranked(scores, best, keep, limit)


def _ranked(
    scores: dict[int, float],
    best: dict[int, tuple[float, str]],
    keep: Callable[[int], bool],
    limit: int,
) -> list[Hit]:
    """The ``limit`` best-scored floors that ``keep`` accepts; newer floors win ties."""
    ranked: list[Hit] = []
    for floor in sorted(scores, key=lambda f: (-scores[f], -f)):
        if keep(floor):
            ranked.append(Hit(floor, scores[floor], best[floor][1]))
            if len(ranked) >= limit:
                break
    return ranked


class ChatIndex(Searcher):
    """BM25 (k1=1.2, b=0.75) over a list of floors.

    The postings are kept flat: term ``i`` has the floors ``floors[bounds[i]:bounds[i + 1]]``
    (ascending) and their term frequencies at the same places in ``tfs``. Terms keep the
    order of their first occurrence, so an index extended by :meth:`updated` is the same as
    one built from scratch.
    """

    def __init__(self, docs: Sequence[Doc], progress: Tally | None = None) -> None:
        self.roles: list[str] = [d.role for d in docs]
        self.hidden = bytearray(d.hidden for d in docs)
        self.lengths = array("I")
        self._terms: dict[str, int] = {}
        self._bounds = array("Q", [0])
        self._floors = array("I")
        self._tfs = array("I")
        texts = [d.text for d in docs]
        for term, seen in _occurrences(texts, 0, self.lengths, progress).items():
            self._add(term, seen)
        self._finish()

    def _add(self, term: str, seen: list[int]) -> None:
        counts = Counter(seen)  # floors in ascending order → tf
        self._floors.extend(counts)
        self._tfs.extend(counts.values())
        self._terms[term] = len(self._terms)
        self._bounds.append(len(self._floors))

    def _finish(self) -> None:
        self.avgdl = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        self._cjk_vocab: list[str] | None = None

    def __len__(self) -> int:
        return len(self.roles)

    def updated(self, keep: int, docs: Sequence[Doc], progress: Tally | None = None) -> ChatIndex:
        """A new index: this one's floors before ``keep``, then ``docs`` as floors ``keep…``."""
        keep = min(keep, len(self))
        new = ChatIndex.__new__(ChatIndex)
        new.roles = [*self.roles[:keep], *(d.role for d in docs)]
        new.hidden = self.hidden[:keep] + bytearray(d.hidden for d in docs)
        new.lengths = self.lengths[:keep]
        new._terms, new._bounds = {}, array("Q", [0])
        new._floors, new._tfs = array("I"), array("I")
        added = _occurrences([d.text for d in docs], keep, new.lengths, progress)
        floors, tfs, bounds = self._floors, self._tfs, self._bounds
        for term, i in self._terms.items():
            start = bounds[i]
            cut = bisect.bisect_left(floors, keep, start, bounds[i + 1])
            if cut == start:
                continue  # only in floors from keep on: comes back in ``added`` if still there
            seen = added.pop(term, None)
            new._floors += floors[start:cut]
            new._tfs += tfs[start:cut]
            if seen is None:
                new._terms[term] = len(new._terms)
                new._bounds.append(len(new._floors))
            else:
                new._add(term, seen)
        for term, seen in added.items():
            new._add(term, seen)
        new._finish()
        return new

    # ------------------------------------------------------------ persistence

    def to_blocks(self) -> dict[str, bytes]:
        """The index as named byte blocks (see :meth:`from_blocks`)."""
        if any("\n" in r for r in self.roles):
            raise ValueError("a role holds a line break")
        return {
            "terms": "\n".join(self._terms).encode("utf-8", "surrogatepass"),
            "bounds": self._bounds.tobytes(),
            "floors": self._floors.tobytes(),
            "tfs": self._tfs.tobytes(),
            "lengths": self.lengths.tobytes(),
            "roles": "\n".join(self.roles).encode("utf-8"),
            "hidden": bytes(self.hidden),
        }

    @classmethod
    def from_blocks(cls, blocks: Mapping[str, bytes]) -> ChatIndex:
        """An index from :meth:`to_blocks`; ``ValueError`` or ``KeyError`` if inconsistent."""
        index = cls.__new__(cls)
        text = blocks["terms"].decode("utf-8", "surrogatepass")
        terms = text.split("\n") if text else []
        index._terms = dict(zip(terms, range(len(terms)), strict=True))
        index._bounds, index._floors = array("Q"), array("I")
        index._tfs, index.lengths = array("I"), array("I")
        index._bounds.frombytes(blocks["bounds"])
        index._floors.frombytes(blocks["floors"])
        index._tfs.frombytes(blocks["tfs"])
        index.lengths.frombytes(blocks["lengths"])
        roles = blocks["roles"].decode("utf-8")
        index.roles = roles.split("\n") if index.lengths else []
        index.hidden = bytearray(blocks["hidden"])
        n = len(index.lengths)
        if (
            len(index._terms) != len(terms)
            or len(index._bounds) != len(terms) + 1
            or index._bounds[0] != 0
            or index._bounds[-1] != len(index._floors)
            or len(index._tfs) != len(index._floors)
            or len(index.roles) != n
            or len(index.hidden) != n
        ):
            raise ValueError("inconsistent chat index")
        index._finish()
        return index

    # ------------------------------------------------------------ queries

    def _postings(self, term: str) -> tuple[array[int], array[int]]:
        i = self._terms[term]
        start, end = self._bounds[i], self._bounds[i + 1]
        return self._floors[start:end], self._tfs[start:end]

    def _expand(self, term: str) -> list[str]:
        """Index terms for a query term: itself, or bigrams holding a lone CJK char."""
        if len(term) == 1 and _is_cjk(term) and term not in self._terms:
            if self._cjk_vocab is None:
                self._cjk_vocab = [t for t in self._terms if len(t) == 2 and _is_cjk(t)]
            return [t for t in self._cjk_vocab if term in t]
        return [term] if term in self._terms else []

    def _matches(self, query: str) -> Iterator[tuple[str, Collection[int], Iterable[int]]]:
        for qterm in dict.fromkeys(tokenize(query)):
            for term in self._expand(qterm):
                yield (term, *self._postings(term))

    def _lengths(self) -> Sequence[int]:
        return self.lengths

    def _floor(self, floor: int) -> tuple[str, bool]:
        return self.roles[floor], bool(self.hidden[floor])


_SCAN_OPTIONS = re2.Options()
_SCAN_OPTIONS.log_errors = False
# The bytes RE2's ``\b`` takes as word characters (ASCII letters, digits, ``_``), one by one.
_WORD_BYTES = frozenset(
    bytes([c]) for c in (string.ascii_letters + string.digits + "_").encode("ascii")
)


class Floor(Protocol):
    """What a scan needs of a floor (a ``ChatMessage`` has it)."""

    @property
    def mes(self) -> str:
        """The floor's text."""
        ...

    @property
    def role(self) -> str:
        """``user``, ``assistant`` or ``system``."""
        ...

    @property
    def hidden(self) -> bool:
        """Whether the floor is hidden from the prompt."""
        ...


class ChatScan(Searcher):
    """BM25 without an index: each query term is looked for in the chat's text.

    It answers while a run's index is still being built, for the cost of one
    pass over the chat's (lower-cased) text per query term. The floors' texts
    are joined into one UTF-8 text (a line break between two floors), searched
    with RE2 (which skips ahead with ``memchr`` on a term's first byte and
    leaves the GIL to other threads) or, for a term starting with an ASCII
    letter, ``bytes.find`` (faster than RE2's DFA when the first byte is a
    common letter); each floor found is then counted and skipped.

    The ranking is the index's with simplifications: a floor's length is its
    UTF-8 byte count (not its tokens); a word is found between RE2's ASCII word
    boundaries, so a word joined to others by ``_`` is missed; and in a floor
    that has the word, its count includes its occurrences inside longer words.
    CJK terms match wherever they appear, as the index's bigrams do.

    ``build`` is the index build under way: it is held :meth:`~Pausable.paused`
    while the scan prepares and while it searches.
    """

    def __init__(self, floors: Sequence[Floor], build: Pausable | None = None) -> None:
        self._floors = floors
        self._build = build
        with self._quiet():
            texts = [f.mes.lower().encode("utf-8", "surrogatepass") for f in floors]
            self._byte_lengths = array("I", map(len, texts))
            # Floor i is self._text[starts[i] : starts[i + 1] - 1].
            self._starts = array("Q", [0])
            self._starts.extend(accumulate(map((1).__add__, self._byte_lengths)))
            self._text = b"\n".join(texts)
        total = len(self._text) - len(texts) + 1
        self.avgdl = (total / len(texts)) if texts else 0.0

    def _quiet(self) -> AbstractContextManager[None]:
        return self._build.paused() if self._build is not None else contextlib.nullcontext()

    def __len__(self) -> int:
        return len(self._byte_lengths)

    def _counts(self, term: str) -> dict[int, int]:
        """Floor → how often ``term`` occurs in it, for the floors that hold it as a word."""
        needle = term.encode("utf-8", "surrogatepass")
        body = re2.escape(needle)
        word = not _is_cjk(term)
        if word:
            body = (rb"\b" if term[0].isascii() else b"") + body
            body += rb"\b" if term[-1].isascii() else b""
        search = re2.compile(body, _SCAN_OPTIONS).search
        text, starts = self._text, self._starts
        count, floor_at = text.count, bisect.bisect_right
        found: dict[int, int] = {}
        if needle[:1].isalnum():
            # An ASCII first letter: ``find`` beats RE2's DFA on a common byte. An occurrence
            # between two non-word bytes is a word; for any other, RE2 looks at the floor.
            size, tail = len(needle), term[-1].isascii()
            at = text.find(needle)
            while at >= 0:
                floor = floor_at(starts, at) - 1
                first, last = starts[floor], starts[floor + 1] - 1
                end = at + size
                if (
                    text[at - 1 : at] not in _WORD_BYTES
                    and not (tail and text[end : end + 1] in _WORD_BYTES)
                ) or search(text, first, last) is not None:
                    found[floor] = count(needle, first, last)
                at = text.find(needle, last)
            return found
        match = search(text)  # RE2 skips to the first byte with memchr and leaves the GIL
        while match is not None:
            floor = floor_at(starts, match.start()) - 1
            first, last = starts[floor], starts[floor + 1] - 1
            found[floor] = count(needle, first, last)
            match = search(text, last)
        return found

    def _matches(self, query: str) -> Iterator[tuple[str, Collection[int], Iterable[int]]]:
        for term in dict.fromkeys(tokenize(query)):
            counts = self._counts(term)
            yield term, counts.keys(), counts.values()

    def _lengths(self) -> Sequence[int]:
        return self._byte_lengths

    def _floor(self, floor: int) -> tuple[str, bool]:
        message = self._floors[floor]
        return message.role, message.hidden


def _occurrences(
    texts: Sequence[str], first: int, lengths: array[int], progress: Tally | None = None
) -> dict[str, list[int]]:
    """Term → the floor of each of its occurrences (ascending); appends each text's length.

    The inner loop runs in C (``map`` over bound lookups and ``list.append``), which is
    what makes building the index of a large chat take seconds rather than many.
    ``progress.done`` counts the texts done, in steps of :data:`_STEP`.
    """
    found: defaultdict[str, list[int]] = defaultdict(list)
    slot = found.__getitem__
    append = list.append
    for start in range(0, len(texts), _STEP):
        for floor, text in enumerate(texts[start : start + _STEP], first + start):
            tokens = tokenize(text)
            lengths.append(len(tokens))
            deque(map(append, map(slot, tokens), repeat(floor)), maxlen=0)
        if progress is not None:
            progress.done = min(start + _STEP, len(texts))
            progress.checkpoint()
    return found


def snippet(text: str, terms: Iterable[str], width: int = 160) -> str:
    """About ``width`` characters of ``text`` around the first of ``terms`` found."""
    flat = " ".join(text.split())
    lowered = flat.lower()
    at = -1
    for term in terms:
        at = lowered.find(term)
        if at >= 0:
            break
    if at < 0:
        at = 0
    start = max(at - width // 3, 0)
    end = min(start + width, len(flat))
    start = max(min(start, end - width), 0)
    piece = flat[start:end]
    return ("…" if start > 0 else "") + piece + ("…" if end < len(flat) else "")
