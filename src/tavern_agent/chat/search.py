"""Ranked chat search: BM25 over floors, with tokens that work for CJK and for words.

Tokens are lower-cased. A run of Chinese, Japanese or Korean characters
becomes its character bigrams (a lone character stays a unigram), since these
scripts do not separate words with spaces; everything else splits into words
of letters and digits. A one-character CJK query term matches every indexed
bigram that contains it.

The index is built once per loaded chat (inverted lists of ``(floor, tf)``)
and answers a query in time proportional to the matching postings.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_WORD = re.compile(rf"[^\W_{_CJK}]+")
_HAS_CJK = re.compile(rf"[{_CJK}]")
K1 = 1.2
B = 0.75


def _is_cjk(token: str) -> bool:
    return _HAS_CJK.match(token) is not None


def tokenize(text: str) -> list[str]:
    """Lower-cased words, and character bigrams for CJK runs."""
    text = text.lower()
    if _HAS_CJK.search(text) is None:
        return _WORD.findall(text)
    out: list[str] = []
    for token in _TOKEN.findall(text):
        if len(token) > 1 and _is_cjk(token):
            out.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.append(token)
    return out


@dataclass(frozen=True, slots=True)
class Doc:
    """What the index needs of a floor."""

    text: str
    role: str
    hidden: bool


@dataclass(frozen=True, slots=True)
class Hit:
    floor: int
    score: float
    term: str  # the query term to centre the snippet on


class ChatIndex:
    """BM25 (k1=1.2, b=0.75) over a list of floors."""

    def __init__(self, docs: Sequence[Doc]) -> None:
        self.docs = docs
        postings: dict[str, tuple[array[int], array[int]]] = {}
        lengths = array("I")
        for floor, doc in enumerate(docs):
            tokens = tokenize(doc.text)
            lengths.append(len(tokens))
            for term, tf in Counter(tokens).items():
                lists = postings.get(term)
                if lists is None:
                    lists = postings[term] = (array("I"), array("I"))
                lists[0].append(floor)
                lists[1].append(tf)
        self.postings = postings
        self.lengths = lengths
        self.avgdl = (sum(lengths) / len(lengths)) if lengths else 0.0
        self._cjk_vocab: list[str] | None = None

    def _expand(self, term: str) -> list[str]:
        """Index terms for a query term: itself, or bigrams holding a lone CJK char."""
        if len(term) == 1 and _is_cjk(term) and term not in self.postings:
            if self._cjk_vocab is None:
                self._cjk_vocab = [t for t in self.postings if len(t) == 2 and _is_cjk(t)]
            return [t for t in self._cjk_vocab if term in t]
        return [term] if term in self.postings else []

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
        """The best ``limit`` floors in ``start…end-1``; newer floors win ties."""
        n = len(self.docs)
        if n == 0:
            return []
        scores: dict[int, float] = {}
        best: dict[int, tuple[float, str]] = {}
        avgdl = self.avgdl or 1.0
        for qterm in dict.fromkeys(tokenize(query)):
            for term in self._expand(qterm):
                floors, tfs = self.postings[term]
                df = len(floors)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                for floor, tf in zip(floors, tfs, strict=True):
                    if floor < start or floor >= end:
                        continue
                    norm = K1 * (1 - B + B * self.lengths[floor] / avgdl)
                    part = idf * tf * (K1 + 1) / (tf + norm)
                    scores[floor] = scores.get(floor, 0.0) + part
                    if part > best.get(floor, (0.0, ""))[0]:
                        best[floor] = (part, term)
        ranked: list[Hit] = []
        for floor in sorted(scores, key=lambda f: (-scores[f], -f)):
            doc = self.docs[floor]
            if role is not None and doc.role != role:
                continue
            if hidden is not None and doc.hidden != hidden:
                continue
            ranked.append(Hit(floor, scores[floor], best[floor][1]))
            if len(ranked) >= limit:
                break
        return ranked


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
