"""A real workspace (with a skills library) and a gate with every built-in tool."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Limits, ShellLimits
from tavern_agent.core.results import AgentToolResult
from tavern_agent.workspace.roots import RootPolicy
from tavern_agent.workspace.store import Workspace
from tests.workspace.conftest import Agent

SHELL = "workspace_shell"


@pytest.fixture
def sandbox_home(tmp_path: Path) -> Path:
    """The folder around the workspace: escape tests hash it before and after."""
    home = tmp_path / "home"
    (home / "secret").mkdir(parents=True)
    (home / "secret" / "key.txt").write_text("TOP SECRET\n")
    skills = home / "skills"
    (skills / "dice").mkdir(parents=True)
    (skills / "dice" / "run.sh").write_text('echo "skill says $1"\n')
    (skills / "dice" / "tool.py").write_text("print(sum([1, 2, 3]))\n")
    (skills / "dice" / "tool.js").write_text(
        "const m = new Map([[2, 'b'], [1, 'a']]);\n"
        "console.log([...m.keys()].sort().join(','), require('fs').existsSync('/skills/dice'));\n"
    )
    (skills / "hidden").mkdir()
    (skills / "hidden" / "SKILL.md").write_text("not for this agent\n")
    return home


@pytest.fixture
def ws(sandbox_home: Path) -> Workspace:
    root = sandbox_home / "ws"
    workspace = Workspace(
        root,
        RootPolicy.for_scene(Scene.CHAT),
        skills_dir=sandbox_home / "skills",
        visible_skills=frozenset({"dice"}),
    )
    (root / "output").mkdir(parents=True)
    (root / "output" / "main.md").write_text("# Chapter one\nThe tavern is quiet.\n")
    return workspace


@pytest.fixture
def agent(ws: Workspace) -> Agent:
    return Agent(ws)


def limited_agent(ws: Workspace, inline: int = 50_000, **shell: float) -> Agent:
    """An agent whose profile sets shell limits (short timeouts keep the suite quick)."""
    agent = Agent(ws)
    limits = Limits(external_result_inline_char_limit=inline, shell=ShellLimits(**shell))
    base = agent.assembly.everything(Scene.CHAT)
    profile = base.model_copy(update={"limits": limits})
    snapshot = agent.assembly.snapshot(profile, Scene.CHAT, ModelProtocol.OPENAI_CHAT, "inv_shell")
    agent.gate = agent.assembly.gate(snapshot, rng=random.Random(0), workspace=ws)
    return agent


@pytest.fixture
def quick(ws: Workspace) -> Agent:
    """Three-second wall time, for tests that run into the limit on purpose."""
    return limited_agent(ws, timeout_seconds=3, js_timeout_seconds=3)


async def sh(agent: Agent, command: str, **extra: object) -> AgentToolResult:
    return await agent(SHELL, command=command, **extra)


def stdout_of(result: AgentToolResult) -> str:
    """The stdout section of a shell result's content."""
    text = result.content
    start = text.index("stdout:") + len("stdout:")
    end = text.index("\nstderr:", start)
    return text[start:end].removeprefix("\n").removeprefix(" ")
