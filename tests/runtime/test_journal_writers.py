"""A journal appended by two writers in turn (a durable run's steps, while one's model
answers): sequence numbers go on without a gap, and a dead writer's torn line is cut."""

from __future__ import annotations

from pathlib import Path

from tavern_agent.runtime.journal import Journal, read_events


def test_a_writer_counts_the_events_another_appended(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = Journal(path, "run_x", fsync=False)
    first.append("model_request", {"who": "parent"})
    second = Journal(path, "run_x", fsync=False)  # another step, on another worker
    second.append("model_request", {"who": "child"})
    second.append("model_response_stored", {"who": "child"})
    first.append("model_response_stored", {"who": "parent"})
    events = read_events(path)
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert [e["payload"]["who"] for e in events] == ["parent", "child", "child", "parent"]


def test_a_dead_writer_s_torn_line_is_cut_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    first = Journal(path, "run_x", fsync=False)
    first.append("model_request", {"who": "parent"})
    second = Journal(path, "run_x", fsync=False)
    second.append("tool_call_started", {"who": "child"})
    with path.open("ab") as f:  # the child's worker dies in the middle of a line
        f.write(b'{"seq":3,"type":"tool_res')
    first.append("model_response_stored", {"who": "parent"})
    events = read_events(path)
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "model_request"),
        (2, "tool_call_started"),
        (3, "model_response_stored"),
    ]
    assert path.read_bytes().endswith(b"}\n")
