"""Command-line options shared by several commands (one definition each)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from tavern_agent.assembly import Assembly, ChatSource
from tavern_agent.chat.activation import ActivationSettings
from tavern_agent.chat.st_data import LATEST, Participants, StDataError, open_st_data
from tavern_agent.config import resolve_profile
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.naming import ModelProtocol
from tavern_agent.core.profile import Profile, ProfileError
from tavern_agent.inputs import InputError, load_card, load_world
from tavern_agent.mcp.approval import ASK_MODES
from tavern_agent.providers.choice import BASE_URL_ENV, ModelChoiceError, model_gateway
from tavern_agent.providers.gateway import ModelGateway
from tavern_agent.providers.openai_chat import COMPAT_MODES

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
PROTOCOLS = [p.value for p in ModelProtocol]
SCENES = [s.value for s in Scene]


def mcp_ask_option(f: F) -> F:
    """``--mcp-ask``: how MCP tools whose permission is ``ask`` are answered."""
    option = click.option(
        "--mcp-ask",
        type=click.Choice(ASK_MODES),
        default="prompt",
        show_default=True,
        help="MCP tools set to 'ask': prompt on a terminal (decline without one), "
        "or answer every such call at once.",
    )
    return option(f)


# ---------------------------------------------------------------- tools, profiles and models


@contextlib.contextmanager
def usage_error(*kinds: type[Exception]) -> Iterator[None]:
    """An error of ``kinds`` raised inside is a usage error: its message says what to give."""
    try:
        yield
    except kinds as exc:
        raise click.UsageError(str(exc)) from None


def chosen_profile(assembly: Assembly, profile_spec: str | None, scene: Scene) -> Profile:
    """The named profile, or one allowing every tool of the catalog."""
    with usage_error(ProfileError):
        if profile_spec is None:
            return assembly.everything(scene)
        return resolve_profile(profile_spec, assembly.data.path)


def on_every_source(data_dir: Path, work: Callable[[Assembly], T]) -> T:
    """Run ``work`` on every tool source of ``data_dir`` (pages included), then close them."""

    async def run() -> T:
        async with await Assembly.open(data_dir) as assembly:
            return work(assembly)

    return asyncio.run(run())


def profile_option(f: Any) -> Any:
    """``--profile P``: a profile id or file; without it, every tool of the catalog."""
    return click.option(
        "--profile",
        "profile_spec",
        metavar="P",
        help="Profile id (data dir or built-in, e.g. default-writer) or a .json path. "
        "Default: every tool in the catalog.",
    )(f)


def scene_option(f: Any) -> Any:
    """``--scene``: the scene the tools are offered for."""
    return click.option(
        "--scene", type=click.Choice(SCENES), default="chat", show_default=True, help="Run scene."
    )(f)


def protocol_option(f: Any) -> Any:
    """``--protocol``: the model protocol whose naming and schema rules apply."""
    return click.option(
        "--protocol",
        type=click.Choice(PROTOCOLS),
        default="openai_chat",
        show_default=True,
        help="Model protocol whose naming and schema rules apply.",
    )(f)


def compat_option(f: F) -> F:
    """``--compat``: which kind of ``openai_chat`` server ``--base-url`` is."""
    option = click.option(
        "--compat",
        type=click.Choice(COMPAT_MODES),
        default=None,
        help="openai_chat server kind: 'openai' (OpenAI's API: max_completion_tokens) or "
        "'compatible' (llama.cpp, Ollama, LM Studio, KoboldCpp: max_tokens). "
        "Default: auto, by the base URL's host.",
    )
    return option(f)


def context_window_option(f: F) -> F:
    """``--context-window``: the model's window, where the server does not say it."""
    option = click.option(
        "--context-window",
        type=click.IntRange(256),
        default=None,
        help="The model's context window in tokens (default: what the server says, else "
        "known per model, else 16384). Requests are kept within it.",
    )
    return option(f)


def model_options(*, model_help: str, replay_help: str) -> Callable[[F], F]:
    """The options that name the model a command's runs call (read back as :class:`ModelFlags`):
    ``--model``, ``--replay``, ``--base-url``, ``--protocol``, ``--api-key-env``,
    ``--compat`` and ``--context-window``; the command says what its model and replay do."""

    def apply(f: F) -> F:
        f = context_window_option(compat_option(f))
        f = click.option(
            "--api-key-env",
            default="OPENAI_API_KEY",
            show_default=True,
            help="Environment variable holding the model's API key.",
        )(f)
        f = click.option(
            "--protocol", type=click.Choice(PROTOCOLS), default="openai_chat", show_default=True
        )(f)
        f = click.option(
            "--base-url", default=None, help=f"The model's API base URL (default ${BASE_URL_ENV})."
        )(f)
        f = click.option(
            "--replay",
            type=click.Path(path_type=Path, file_okay=False, exists=True),
            default=None,
            help=replay_help,
        )(f)
        return click.option("--model", default=None, help=model_help)(f)

    return apply


@dataclass(frozen=True)
class ModelFlags:
    """The model options of ``run`` and ``serve`` (:func:`model_options`), as click parsed them."""

    model: str | None
    replay: Path | None
    base_url: str | None
    protocol: str
    api_key_env: str
    compat: str | None
    context_window: int | None

    def model_flags(self) -> dict[str, Any]:
        """These options by :func:`model_gateway`'s parameter names (to rebuild it elsewhere)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ModelFlags)}

    def check_model(self) -> None:
        """A usage error for a model named twice (``--model`` and ``--replay``)."""
        if self.model is not None and self.replay is not None:
            raise click.UsageError("--model and --replay exclude each other")

    def model_gateway(
        self, record: dict[str, Any] | None = None
    ) -> tuple[ModelGateway, dict[str, Any]]:
        """The model these options name (``record``: a resumed run's, where no flag is given)."""
        with usage_error(ModelChoiceError):
            return model_gateway(**self.model_flags(), record=record)


# ---------------------------------------------------------------- SillyTavern data and world info

_WI_META = "tavern_agent.world_info"

# on/off flag → (ActivationSettings field, help)
_WI_SWITCHES: tuple[tuple[str, str, str], ...] = (
    ("--wi-case-sensitive/--wi-case-insensitive", "case_sensitive", "Keys match case."),
    ("--wi-whole-words/--wi-substrings", "match_whole_words", "Keys match whole words."),
    ("--wi-include-names/--wi-no-names", "include_names", "Scan 'name: message'."),
    ("--wi-recursive/--wi-no-recursion", "recursive", "Activated entries' text is scanned."),
    ("--wi-group-scoring/--wi-no-group-scoring", "use_group_scoring", "Group scoring."),
)
# number flag → (ActivationSettings field, number type, help)
_WI_NUMBERS: tuple[tuple[str, str, type[int | float], str], ...] = (
    ("--wi-depth", "scan_depth", int, "Messages world info scans (SillyTavern: scan depth)."),
    ("--wi-max-recursion-steps", "max_recursion_steps", int, "Scan passes at most (0: no cap)."),
    ("--wi-min-activations", "min_activations", int, "Scan deeper until this many activate."),
    ("--wi-min-activations-depth-max", "min_activations_depth_max", int, "Deepest such scan."),
    ("--wi-budget", "budget_percent", float, "World info budget, % of --wi-context."),
    ("--wi-budget-cap", "budget_cap", int, "World info budget cap in tokens (0: none)."),
    ("--wi-context", "max_context", int, "Model context in tokens the budget is a share of."),
)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None and param.name is not None:
        ctx.meta.setdefault(_WI_META, {})[param.name] = value


def _wi_option(flag: str, name: str, text: str, **kind: Any) -> Callable[[F], F]:
    """A ``--wi-…`` option: given, it is kept for :func:`world_info_settings`."""
    return click.option(
        flag, name, default=None, expose_value=False, callback=_remember, help=text, **kind
    )


def world_info_options(f: F) -> F:
    """``--st-data``, ``--group`` and the world info setting flags (``--wi-…``).

    The flags override SillyTavern's ``settings.json`` (with ``--st-data``) or
    the defaults; read them back with :func:`world_info_settings`.
    """
    for flag, name, text in reversed(_WI_SWITCHES):
        f = _wi_option(flag, name, text, is_flag=True)(f)
    for flag, name, number, text in reversed(_WI_NUMBERS):
        f = _wi_option(flag, name, text, type=number)(f)
    f = click.option(
        "--group",
        "group",
        default=None,
        metavar="NAME",
        help="With --st-data: a group chat of the group NAME (--character picks who replies).",
    )(f)
    return click.option(
        "--st-data",
        "st_data",
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        default=None,
        help="A SillyTavern data/<user>/ folder: --character is a name there, the chat "
        "a file name or 'latest', and its lorebooks and settings apply.",
    )(f)


def chat_options(f: F) -> F:
    """The options :class:`ChatFlags` reads but the chat itself (``run`` takes it as an
    argument, ``call`` as ``--chat``): ``--character``, ``--world`` and
    :func:`world_info_options`."""
    f = world_info_options(f)
    f = click.option(
        "--world",
        "world_files",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        multiple=True,
        help="A world info (lorebook) JSON to activate against the chat; repeatable.",
    )(f)
    return click.option(
        "--character",
        default=None,
        metavar="CARD",
        help="A character card (JSON or PNG); its embedded lorebook is activated too. "
        "With --st-data: the character's name.",
    )(f)


def world_info_settings(base: ActivationSettings | None = None) -> ActivationSettings:
    """``base`` (or the defaults) with the ``--wi-…`` flags given on this command line."""
    given = click.get_current_context().meta.get(_WI_META, {})
    return dataclasses.replace(base or ActivationSettings(), **given)


def st_data_source(
    st_data: Path,
    *,
    character: str | None,
    chat: str | None,
    group: str | None,
    extra_worlds: tuple[Path, ...] = (),
    seed: int | None = None,
) -> ChatSource:
    """The chat source ``--st-data`` names (usage errors say what the folder holds)."""
    with usage_error(StDataError, InputError):
        selection = open_st_data(st_data, character=character, chat=chat or LATEST, group=group)
        extra = tuple(load_world(p) for p in extra_worlds)
    for note in selection.notes:
        click.echo(f"tavern-agent: note: {note}", err=True)
    source = ChatSource.from_st_data(selection, seed=seed)
    return dataclasses.replace(
        source, books=source.books + extra, settings=world_info_settings(selection.settings)
    )


def chat_source_from_files(
    chat_file: Path, character: str | None, world_files: tuple[Path, ...], seed: int | None
) -> ChatSource:
    """The chat source of a chat file, a card file and lorebook files given one by one."""
    if not chat_file.is_file():
        raise click.UsageError(f"no chat file {chat_file}")
    card_file = Path(character) if character is not None else None
    if card_file is not None and not card_file.is_file():
        raise click.UsageError(f"no card file {card_file} (a name needs --st-data)")
    with usage_error(InputError):
        books = tuple(load_world(p) for p in world_files)
        card = load_card(card_file) if card_file is not None else None
    stem = card_file.stem if card_file is not None else ""
    return ChatSource(
        chat_file,
        books,
        card,
        seed,
        world_info_settings(),
        participants=Participants(character_file=stem),
    )


@dataclass(frozen=True)
class ChatFlags:
    """The options of ``run`` and ``call`` that name a chat: a SillyTavern folder
    (``--st-data``, ``--group``), or a chat file, card and lorebooks one by one."""

    st_data: Path | None
    chat: str | None
    character: str | None
    group: str | None
    world_files: tuple[Path, ...]
    seed: int | None

    def chat_source(self) -> ChatSource | None:
        """The chat these options name; ``None`` when they name none (a session run, a
        call without a chat)."""
        if self.st_data is not None:
            return st_data_source(
                self.st_data,
                character=self.character,
                chat=self.chat,
                group=self.group,
                extra_worlds=self.world_files,
                seed=self.seed,
            )
        if self.group is not None:
            raise click.UsageError("--group needs --st-data")
        if self.chat is None:
            return None
        return chat_source_from_files(Path(self.chat), self.character, self.world_files, self.seed)
