"""A follower reads only what was appended since its last look; a half-written line waits."""

from __future__ import annotations

from pathlib import Path

from tavern_agent.runtime.journal import Journal, JournalTail


def test_the_tail_gives_each_event_once_and_waits_for_a_half_written_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = JournalTail(path)
    assert tail.new_events() == []  # no journal yet
    journal = Journal(path, "run_1", fsync=False)
    journal.append("run_started", {})
    journal.append("model_request", {"round": 1})
    assert [e["seq"] for e in tail.new_events()] == [1, 2]
    assert tail.new_events() == []
    with path.open("ab") as f:  # a writer in the middle of its line
        f.write(b'{"seq": 3, "type": "model_resp')
    assert tail.new_events() == []
    with path.open("ab") as f:
        f.write(b'onse_stored"}\n')
    assert [(e["seq"], e["type"]) for e in tail.new_events()] == [(3, "model_response_stored")]
    journal.close()
