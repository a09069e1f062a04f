"""The search index: fast tokenising, incremental updates and persistence give the same index."""

from __future__ import annotations

import random
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tavern_agent.chat.search import _CJK, ChatIndex, Doc, Hit, tokenize

_RUN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
ALPHABET = st.sampled_from([*map(chr, range(0, 140)), *"森林神殿龍のはをÉéİßẞ_\u2019\u00a0一가ｱ"])


def reference_tokens(text: str) -> list[str]:
    """The tokeniser as first written: one regex, then bigrams of CJK runs."""
    out: list[str] = []
    for token in _RUN.findall(text.lower()):
        if len(token) > 1 and re.match(rf"[{_CJK}]", token):
            out.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.append(token)
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(ALPHABET, max_size=40))
def test_tokenize_matches_the_reference(text: str) -> None:
    assert tokenize(text) == reference_tokens(text)


def docs(rng: random.Random, count: int) -> list[Doc]:
    words = ["castle", "Forest", "dragon's", "the", "a", "moon_light", "森林", "神殿", "龙", "の"]
    return [
        Doc(
            " ".join(rng.choice(words) for _ in range(rng.randint(0, 12))),
            rng.choice(["user", "assistant", "system"]),
            rng.random() < 0.2,
        )
        for _ in range(count)
    ]


def same(a: ChatIndex, b: ChatIndex) -> None:
    assert a.to_blocks() == b.to_blocks()
    assert a.avgdl == b.avgdl


def hits(index: ChatIndex, query: str) -> list[Hit]:
    return index.search(query, limit=50, end=len(index))


def test_updated_index_equals_a_fresh_build() -> None:
    rng = random.Random(5)
    for _ in range(30):
        full = docs(rng, rng.randint(0, 40))
        old = docs(rng, rng.randint(0, 40))
        keep = rng.randint(0, len(full))
        base = ChatIndex([*full[:keep], *old])  # floors from `keep` on have changed since
        updated = base.updated(keep, full[keep:])
        fresh = ChatIndex(full)
        same(updated, fresh)
        for query in ["forest castle", "龙", "森", "the moon", "nothing"]:
            assert hits(updated, query) == hits(fresh, query)


def test_blocks_round_trip() -> None:
    index = ChatIndex(docs(random.Random(2), 60))
    again = ChatIndex.from_blocks(index.to_blocks())
    same(again, index)
    assert hits(again, "dragon 森林") == hits(index, "dragon 森林")
    empty = ChatIndex([])
    same(ChatIndex.from_blocks(empty.to_blocks()), empty)
