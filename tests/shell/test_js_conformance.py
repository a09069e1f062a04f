"""JavaScript in the shell (``node``): snippets whose expected output came from real Node.

Each ``js_conformance/NAME.js`` runs as ``node /scratch/NAME.js`` inside the
sandbox, fed ``NAME.stdin`` when present; stdout plus ``exit=N`` must equal
``NAME.out``, and ``NAME.err`` (when present) must appear in stderr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shell.conftest import sh, stdout_of
from tests.workspace.conftest import Agent

CASES = Path(__file__).parent / "js_conformance"
NAMES = sorted(p.stem for p in CASES.glob("*.js"))


def test_there_are_enough_cases() -> None:
    assert len(NAMES) >= 30


@pytest.mark.parametrize("name", NAMES)
async def test_snippet(agent: Agent, name: str) -> None:
    scratch = agent.workspace.root / "scratch"
    scratch.mkdir(exist_ok=True)
    (scratch / f"{name}.js").write_text((CASES / f"{name}.js").read_text())
    stdin = CASES / f"{name}.stdin"
    feed = ""
    if stdin.exists():
        (scratch / f"{name}.stdin").write_text(stdin.read_text())
        feed = f"cat /scratch/{name}.stdin | "
    result = await sh(agent, f'{feed}node /scratch/{name}.js; echo "exit=$?"')
    expected = (CASES / f"{name}.out").read_text()
    assert stdout_of(result) + "\n" == expected, result.content
    err = CASES / f"{name}.err"
    if err.exists():
        stderr = result.content.split("\nstderr:", 1)[1]
        assert err.read_text().strip() in stderr, result.content
