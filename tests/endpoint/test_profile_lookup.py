"""The profile a request's ``model`` names: saved ones as they are now, the built-ins, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tavern_agent.endpoint.protocol import RequestError
from tavern_agent.endpoint.runs import profile_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "profile.json"


def test_a_saved_profile_is_read_as_it_is_at_each_request(tmp_path: Path) -> None:
    saved = tmp_path / "profiles" / "writer.json"
    saved.parent.mkdir()
    profile = json.loads(EXAMPLE.read_text()) | {"id": "writer", "name": "First"}
    saved.write_text(json.dumps(profile))
    first = profile_for("tavern-agent/writer", tmp_path)
    assert first.name == "First" and profile_for("writer", tmp_path) == first

    saved.write_text(json.dumps(profile | {"name": "Edited"}))
    assert profile_for("tavern-agent/writer", tmp_path).name == "Edited"

    saved.write_text("{not json")
    with pytest.raises(RequestError) as broken:
        profile_for("tavern-agent/writer", tmp_path)
    assert broken.value.status == 500 and broken.value.code == "profile_invalid"

    saved.unlink()
    with pytest.raises(RequestError) as gone:
        profile_for("tavern-agent/writer", tmp_path)
    assert gone.value.status == 404 and gone.value.code == "model_not_found"


def test_a_saved_profile_named_as_a_built_in_replaces_it_until_deleted(tmp_path: Path) -> None:
    builtin = profile_for(None, tmp_path)  # no model: the default writer
    assert builtin.id == "default-writer"
    saved = tmp_path / "profiles" / "default-writer.json"
    saved.parent.mkdir()
    profile = json.loads(EXAMPLE.read_text()) | {"id": "default-writer", "name": "Mine"}
    saved.write_text(json.dumps(profile))
    assert profile_for("tavern-agent/default-writer", tmp_path).name == "Mine"
    saved.unlink()
    assert profile_for("tavern-agent/default-writer", tmp_path) == builtin
