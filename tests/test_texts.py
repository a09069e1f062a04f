"""The shared text rules: host paths out, lists and counts in plain words."""

from __future__ import annotations

import pytest

from tavern_agent.tools.texts import count, either, outside_text, past_the_end
from tavern_agent.workspace.paths import without_host_paths


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("open /home/ann/notes/db.sqlite: locked", "open <path>: locked"),
        ("cannot read '/tmp/pytest-1/x.json'", "cannot read '<path>'"),
        ("see file:///C:/Users/ann/x.txt now", "see <path> now"),
        (r"C:\Users\ann\x.txt is busy", "<path> is busy"),
        (r"share \\server\docs\x is gone", "share <path> is gone"),
        ("~/secrets/key.pem missing", "<path> missing"),
        # Not host paths: workspace paths, ratios, relative paths, one-segment words.
        ("read output/main.md", "read output/main.md"),
        ("3/4 done, and/or 1/2", "3/4 done, and/or 1/2"),
        ("'../etc/passwd' is not allowed", "'../etc/passwd' is not allowed"),
        ("use /bin", "use /bin"),
    ],
)
def test_host_paths_are_replaced(text: str, shown: str) -> None:
    assert without_host_paths(text) == shown


def test_outside_text_is_one_short_line() -> None:
    long = "first line /var/lib/x/y " + "z" * 400 + "\nsecond line"
    shown = outside_text(long)
    assert shown.startswith("first line <path> ") and "\n" not in shown
    assert len(shown) == 300 and shown.endswith("…")


def test_counts_lists_and_offsets_read_as_sentences() -> None:
    assert (count(1, "call"), count(3, "call"), count(1_200, "line")) == (
        "1 call",
        "3 calls",
        "1,200 lines",
    )
    assert [either([]), either(["a"]), either(["a", "b"]), either(["a", "b", "c"], "and")] == [
        "",
        "a",
        "a or b",
        "a, b and c",
    ]
    assert past_the_end("Floor 4", 9, 3) == (
        "Floor 4 has 3 lines, so offset 9 is past its end. Use an offset from 1 to 3."
    )
    assert past_the_end("x.md", 2, 1).endswith("Use offset 1.")
