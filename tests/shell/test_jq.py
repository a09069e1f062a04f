"""The shell's jq: libjq in a limited child process, reading through the sandbox's filesystem."""

from __future__ import annotations

import json
import os
import time

import pytest

from tavern_agent.tools.builtin import shell_jq
from tavern_agent.workspace.store import Workspace
from tests.shell.conftest import limited_agent, sh, stdout_of
from tests.workspace.conftest import Agent

PARTY = {
    "party": [
        {"name": "Seraphina", "class": "mage", "level": 12, "hp": 31.5, "tags": ["elf"]},
        {"name": "Brom", "class": "fighter", "level": 9, "hp": 88, "tags": []},
    ],
    "inn": {"name": "The Pony", "rooms": 7, "open": True, "owner": None},
    "notes": "Rain tonight.\nBring lanterns.",
}
# (command, stdout) as host jq 1.6 prints them for PARTY in /scratch/party.json.
TABLE = [
    (
        "jq .inn /scratch/party.json",
        '{\n  "name": "The Pony",\n  "rooms": 7,\n  "open": true,\n  "owner": null\n}',
    ),
    ("jq -r '.party[].name' /scratch/party.json", "Seraphina\nBrom"),
    ("jq -c '[.party[] | select(.level > 10) | .name]' /scratch/party.json", '["Seraphina"]'),
    ("jq '[.party[].hp] | add / length' /scratch/party.json", "59.75"),
    ("jq -rc '.notes | split(\"\\n\")' /scratch/party.json", '["Rain tonight.","Bring lanterns."]'),
    ("jq -S -c .inn /scratch/party.json", '{"name":"The Pony","open":true,"owner":null,"rooms":7}'),
    ("jq -r '.party[] | [.name, .level] | @csv' /scratch/party.json", '"Seraphina",12\n"Brom",9'),
    (
        "cat /scratch/party.json | jq -c 'reduce .party[] as $p ({}; .[$p.class] += $p.level)'",
        '{"mage":12,"fighter":9}',
    ),
    ("cd /scratch && jq -c --arg n Brom '.party[] | select(.name == $n) | .tags' party.json", "[]"),
    ("jq -n -c --argjson x '{\"a\":[1,2]}' '$x.a | map(. * 1.5)'", "[1.5,3]"),
    ("jq -e .inn.owner /scratch/party.json; echo code=$?", "null\ncode=1"),
]  # fmt: skip


@pytest.fixture
def party(agent: Agent, ws: Workspace) -> Agent:
    (ws.root / "scratch").mkdir(exist_ok=True)
    (ws.root / "scratch" / "party.json").write_text(json.dumps(PARTY))
    return agent


@pytest.mark.parametrize(("command", "expected"), TABLE)
async def test_answers_as_host_jq(party: Agent, command: str, expected: str) -> None:
    result = await sh(party, command)
    assert stdout_of(result) == expected, result.content


async def test_a_file_above_bashkits_32_mb_value_cap(ws: Workspace, agent: Agent) -> None:
    (ws.root / "scratch").mkdir(exist_ok=True)
    rows = [{"id": i, "note": "x" * 300} for i in range(110_000)]  # about 35 MB
    (ws.root / "scratch" / "big.json").write_text(json.dumps(rows))
    result = await sh(agent, "jq 'map(select(.id % 1000 == 0)) | length' /scratch/big.json")
    assert stdout_of(result) == "110", result.content


async def test_isolation(party: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVERN_HOST_SECRET", "s3cret")  # the host's, never the sandbox's
    env = await sh(
        party,
        "export MINE=1 LD_PRELOAD=/nope.so; "
        "jq -n -c '[$ENV.MINE, $ENV.TAVERN_HOST_SECRET, $ENV.GLIBC_TUNABLES, env.GLIBC_TUNABLES]'",
    )
    # GLIBC_TUNABLES is set for the worker's allocator only, never shown to the program.
    assert env.content.endswith('stdout:\n["1",null,null,null]\nstderr: (empty)'), env.content
    for program in ('import "a" as a; .', 'include "a"; .', "modulemeta"):
        refused = await sh(party, f"jq '{program}' /scratch/party.json")
        assert "not available in this sandbox" in refused.content, program
    hidden = await sh(party, "jq . /input/chat.json; jq . /scratch/none.json")
    assert hidden.content.count("Could not open") == 2, hidden.content


def jq_workers() -> list[str]:
    """The jq worker processes this test process started that are still alive."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()  # noqa: SIM115
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"jq_worker" in cmdline:
            found.append(pid)
    return found


async def test_a_runaway_program_is_stopped_at_the_call_deadline(ws: Workspace) -> None:
    agent = limited_agent(ws, timeout_seconds=3)
    started = time.monotonic()
    result = await sh(agent, "jq -n 'last(range(1e18))'; echo code=$?")
    assert time.monotonic() - started < 8
    assert "jq: stopped: the call's time limit was reached" in result.content, result.content
    assert "code=124" in result.content
    assert jq_workers() == []


async def test_endless_output_is_stopped_at_the_cap(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shell_jq, "OUTPUT_BYTES", 100_000)
    started = time.monotonic()
    result = await sh(agent, "jq -n 'range(1e15)' | wc -c; echo code=${PIPESTATUS[0]}")
    assert time.monotonic() - started < 20  # not the 30 s call limit: stopped at the cap
    assert "100000" in result.content and "code=1" in result.content, result.content
    assert jq_workers() == []
