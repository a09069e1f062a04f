"""The public surface: what each importable package exports, and that it imports."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import tavern_agent
from tavern_agent.core.errors import ERRORS, ErrorCode
from tests.test_python_api_docs import names_the_docs_use

PUBLIC = {
    "tavern_agent": [
        "AgentToolResult",
        "Assembly",
        "ChatSource",
        "Engine",
        "ErrorCode",
        "ExtensionContext",
        "ExtensionRegistry",
        "HttpGateway",
        "JournalRecord",
        "McpManager",
        "ModelConfig",
        "ModelProtocol",
        "Opaque",
        "Participants",
        "Profile",
        "Registration",
        "ReplayGateway",
        "Run",
        "RunCompleted",
        "RunResult",
        "RunSpec",
        "Scene",
        "ScriptedGateway",
        "ToolCall",
        "ToolDescriptor",
        "ToolId",
        "ToolResultStored",
        "Turn",
        "read_events",
        "read_journal",
        "registry",
    ],
    "tavern_agent.extensions": [
        "AlreadyRegistered",
        "CombinedExtensionTools",
        "ExtensionContext",
        "ExtensionHost",
        "ExtensionRegistry",
        "HostFiles",
        "HostUnavailable",
        "RemoteExtensionTools",
        "registry",
    ],
    "tavern_agent.mcp": [
        "ApprovalRequest",
        "Approver",
        "McpManager",
        "Registration",
        "RegistrationError",
        "RegistrationStore",
        "has_registrations",
        "policy_approver",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_each_exported_name_imports(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PUBLIC[package]
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_the_top_level_names_are_the_real_objects() -> None:
    from tavern_agent.assembly import Assembly
    from tavern_agent.runtime.run import Run

    assert tavern_agent.Assembly is Assembly
    assert tavern_agent.Run is Run
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = tavern_agent.Nope  # type: ignore[attr-defined]


def test_each_top_level_name_is_the_real_documented_object() -> None:
    """Each top-level name resolves to the object of its home module, which says what it is
    for; the names the docs use are among them."""
    from tavern_agent import _EXPORTS

    assert names_the_docs_use() <= set(PUBLIC["tavern_agent"])
    for name in PUBLIC["tavern_agent"]:
        home = importlib.import_module(_EXPORTS[name])
        value = getattr(tavern_agent, name)
        assert value is getattr(home, name), name
        if callable(value):  # a dataclass without a docstring gets its signature as one
            doc = (value.__doc__ or "").strip()
            assert doc and not doc.startswith(f"{name}("), f"{name} has no docstring"


def test_importing_the_package_loads_nothing_heavy() -> None:
    code = (
        "import sys, tavern_agent;"
        "print(sorted(m for m in sys.modules if m.startswith('tavern_agent')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tavern_agent']"


def test_every_error_code_is_in_the_error_table() -> None:
    assert set(ERRORS) == set(ErrorCode)
    assert all(info.meaning.endswith(".") for info in ERRORS.values())
