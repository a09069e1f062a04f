"""Python-registered extension tools, called through the real gate."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tavern_agent.assembly import Assembly
from tavern_agent.core.calls import ToolCall
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.core.results import AgentToolResult
from tavern_agent.extensions import AlreadyRegistered, ExtensionContext, ExtensionRegistry
from tavern_agent.tools.gate import ToolRequestGate

from .conftest import make_gate

WEATHER = ToolId.extension("weather", "forecast")


class Weather:
    """A small extension module's state: what its functions did."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.contexts: list[ExtensionContext] = []


@pytest.fixture
def weather() -> Weather:
    return Weather()


@pytest.fixture
def reg(weather: Weather) -> ExtensionRegistry:
    reg = ExtensionRegistry()

    @reg.tool(extension_id="weather", name="forecast", description="Forecast for a city.")
    def forecast(city: str, days: int = 1, ctx: ExtensionContext | None = None) -> dict[str, Any]:
        weather.calls.append({"city": city, "days": days})
        return {"city": city, "days": days, "sky": "clear"}

    @reg.tool(extension_id="weather", name="now", description="Weather here, now.")
    async def now(ctx: ExtensionContext, units: str = "metric") -> str:
        weather.contexts.append(ctx)
        return f"18 degrees ({units})"

    @reg.tool(extension_id="weather", name="broken", description="Always fails.")
    def broken(reason: str) -> None:
        raise RuntimeError(f"station offline: {reason}")

    @reg.tool(extension_id="weather", name="odd", description="Returns a set.", scenes=["session"])
    def odd() -> Any:
        return {1, 2}

    @reg.tool(extension_id="weather", name="wait", description="Waits for cancellation.")
    async def wait(ctx: ExtensionContext) -> str:
        await ctx.cancelled.wait()
        return "stopped early"

    @reg.tool(extension_id="weather", name="long", description="A long report.")
    def long() -> str:
        return "rain " * 20_000

    return reg


def gate_for(
    reg: ExtensionRegistry, tmp_path: Path | None = None, scene: Scene = Scene.CHAT
) -> ToolRequestGate:
    assembly = Assembly(Path("/nonexistent-data-root"), extensions=reg)
    return make_gate(assembly, assembly.everything(scene), workspace=tmp_path, scene=scene)


async def call(gate: ToolRequestGate, name: str, raw: Any, **kw: Any) -> AgentToolResult:
    return (await gate.handle(ToolCall("call_1", name, raw), round=1, **kw)).result


def test_schema_comes_from_type_hints(reg: ExtensionRegistry) -> None:
    (descriptor,) = [d for d in reg.catalog(Scene.CHAT) if d.tool_id == WEATHER]
    assert descriptor.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
        "required": ["city"],
        "additionalProperties": False,
    }
    now = reg.tools[ToolId.extension("weather", "now")].descriptor
    assert set(now.property_names) == {"units"}  # the context parameter is not an argument


def test_listed_in_snapshot_by_name_hint_and_scene(reg: ExtensionRegistry) -> None:
    chat = gate_for(reg).snapshot
    assert chat.name_of(WEATHER) == "forecast"
    assert chat.name_of(ToolId.extension("weather", "odd")) is None  # session only
    session = gate_for(reg, scene=Scene.SESSION).snapshot
    assert session.name_of(ToolId.extension("weather", "odd")) == "odd"
    assert reg.origin(WEATHER) == f"module {__name__}"


async def test_valid_arguments_return_plain_json(reg: ExtensionRegistry, weather: Weather) -> None:
    result = await call(gate_for(reg), "forecast", '{"city": "Oslo", "days": 2}')
    assert not result.is_error
    assert json.loads(result.content) == {"city": "Oslo", "days": 2, "sky": "clear"}
    assert result.structured == {"city": "Oslo", "days": 2, "sky": "clear"}
    assert result.tool_id == WEATHER
    assert weather.calls == [{"city": "Oslo", "days": 2}]


async def test_empty_arguments_use_defaults_and_context(
    reg: ExtensionRegistry, weather: Weather
) -> None:
    result = await call(gate_for(reg), "now", "")
    assert result.content == "18 degrees (metric)" and not result.is_error
    (ctx,) = weather.contexts
    assert (ctx.run_id, ctx.invocation_id, ctx.call_id) == ("run_test", "inv_test", "call_1")
    assert ctx.target["kind"] == "chat"


async def test_empty_arguments_for_required_parameter_is_a_fixable_error(
    reg: ExtensionRegistry, weather: Weather
) -> None:
    result = await call(gate_for(reg), "forecast", None)
    assert result.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
    assert "city" in result.content
    assert weather.calls == []


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ('{"city": 5}', "city"),
        ('{"city": "Oslo", "day": 2}', "day"),
        ("[1, 2]", "JSON object"),
    ],
)
async def test_invalid_arguments_never_reach_the_function(
    reg: ExtensionRegistry, weather: Weather, raw: str, hint: str
) -> None:
    result = await call(gate_for(reg), "forecast", raw)
    assert result.error_code is ErrorCode.TOOL_INVALID_ARGUMENTS
    assert hint in result.content
    assert weather.calls == []


async def test_exception_becomes_error_result_with_its_message(reg: ExtensionRegistry) -> None:
    result = await call(gate_for(reg), "broken", '{"reason": "storm"}')
    assert result.is_error and result.error_code is ErrorCode.EXTENSION_TOOL_ERROR
    assert result.content == (
        "broken failed: station offline: storm. Try other arguments, or go on without it."
    )


async def test_exception_text_reaches_the_model_short_and_path_free(
    reg: ExtensionRegistry, tmp_path: Path
) -> None:
    secret = tmp_path / "home" / "user" / "station.db"

    @reg.tool(extension_id="weather", name="leaky", description="Fails with a host path.")
    def leaky() -> None:
        raise OSError(f"cannot open {secret}: locked\n  more detail on line two")

    result = await call(gate_for(reg), "leaky", "{}")
    assert result.content == (
        "leaky failed: cannot open <path>: locked. Try other arguments, or go on without it."
    )
    assert str(tmp_path) not in result.content
    # The full text stays in the stored result, which the model is not sent.
    details = result.structured["details"]
    assert details["exception"] == "OSError"
    assert details["message"] == f"cannot open {secret}: locked\n  more detail on line two"
    assert "raise OSError" in details["traceback"]


async def test_non_json_return_names_the_type(reg: ExtensionRegistry) -> None:
    result = await call(gate_for(reg, scene=Scene.SESSION), "odd", "{}")
    assert result.error_code is ErrorCode.EXTENSION_INVALID_RESULT
    assert "returned a set, which is not plain JSON" in result.content


async def test_disabled_or_removed_since_snapshot_is_unavailable_no_action(
    reg: ExtensionRegistry, weather: Weather
) -> None:
    gate = gate_for(reg)
    reg.set_enabled(WEATHER, False)
    result = await call(gate, "forecast", '{"city": "Oslo"}')
    assert result.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert "no action was taken" in result.content
    reg.unregister(WEATHER)
    result = await call(gate, "forecast", '{"city": "Oslo"}')
    assert result.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert weather.calls == []


def test_duplicate_tool_id_is_refused(reg: ExtensionRegistry) -> None:
    with pytest.raises(AlreadyRegistered, match="registered already") as caught:
        reg.register(lambda: 1, extension_id="weather", name="forecast", description="again")
    assert caught.value.code is ErrorCode.EXTENSION_TOOL_ALREADY_REGISTERED


async def test_explicit_schema_passes_arguments_through() -> None:
    reg = ExtensionRegistry()
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    }
    reg.register(
        lambda q: {"echo": q}, extension_id="x", name="echo", description="Echo.", parameters=schema
    )
    result = await call(gate_for(reg), "echo", '{"q": "hi"}')
    assert result.structured == {"echo": "hi"}


async def test_cancellation_signal_reaches_the_function(reg: ExtensionRegistry) -> None:
    gate = gate_for(reg)
    cancelled = asyncio.Event()
    running = asyncio.ensure_future(call(gate, "wait", "{}", cancelled=cancelled))
    await asyncio.sleep(0)
    assert not running.done()
    cancelled.set()
    result = await running
    assert result.content == "stopped early"


async def test_long_result_goes_through_the_shared_spill_step(
    reg: ExtensionRegistry, tmp_path: Path
) -> None:
    result = await call(gate_for(reg, tmp_path), "long", "{}")
    assert result.structured["externalized"] is True
    spilled = tmp_path / result.structured["path"]
    assert spilled.read_text().replace("\n", "") == "rain " * 20_000
    assert result.resource_refs == (result.structured["path"],)


async def test_a_hanging_tool_gets_the_time_limit_and_cancellation_like_a_page_tool() -> None:
    reg = ExtensionRegistry(call_timeout=0.3)
    release = threading.Event()

    @reg.tool(extension_id="slow", name="block", description="Blocks its thread.")
    def block() -> str:
        release.wait(30)  # a plain function that hangs: it must not stall the event loop
        return "late"

    @reg.tool(extension_id="slow", name="sleep", description="Never returns.")
    async def sleep() -> str:
        await asyncio.sleep(3600)
        return "never"

    gate = gate_for(reg)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.ensure_future(ticker())
    try:
        blocked = await call(gate, "block", "{}")
        slept = await call(gate, "sleep", "{}")
        cancelled = asyncio.Event()
        pending = asyncio.ensure_future(call(gate, "block", "{}", cancelled=cancelled))
        await asyncio.sleep(0.05)
        cancelled.set()
        stopped = await pending
    finally:
        beat.cancel()
        release.set()
    assert ticks > 10  # the loop kept running while the plain function blocked
    for result in (blocked, slept):
        assert result.error_code is ErrorCode.EXTENSION_TOOL_TIMEOUT
        assert "no answer within 0.3 s" in result.content
        assert "Check the current state before repeating it." in result.content
    assert stopped.error_code is ErrorCode.EXTENSION_TOOL_CANCELLED
