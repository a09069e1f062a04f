"""The ``tavern-agent`` command line."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from tavern_agent.commands.mcp import mcp_group
from tavern_agent.commands.profiles import profile_group, skills_group
from tavern_agent.commands.run import run_command, runs_group
from tavern_agent.commands.serve import serve_command
from tavern_agent.commands.sillytavern import sillytavern_group
from tavern_agent.commands.tools import call_command, tools_group
from tavern_agent.commands.worker import worker_command
from tavern_agent.config import default_data_dir
from tavern_agent.terminal import say


def load_modules(modules: Iterable[str]) -> None:
    """Import modules that register Python extension tools on the default registry."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise click.UsageError(f"--ext {name}: cannot import it: {exc}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Data root (default: $TAVERN_AGENT_DATA_DIR or ~/.local/share/tavern-agent).",
)
@click.option(
    "--ext",
    "ext_modules",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE, which registers Python extension tools (repeatable).",
)
@click.version_option(package_name="tavern-agent")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, ext_modules: tuple[str, ...]) -> None:
    """tavern-agent: the tool layer of a roleplay chat agent.

    List the tools a profile offers a model, or send one call through the
    same gate, dispatch and result steps a real run uses.
    """
    ctx.obj = {"data_dir": data_dir or default_data_dir(), "ext_modules": ext_modules}
    load_modules(ext_modules)


cli.add_command(tools_group)
cli.add_command(call_command)
cli.add_command(skills_group)
cli.add_command(profile_group)
cli.add_command(mcp_group)
cli.add_command(serve_command)
cli.add_command(sillytavern_group)
cli.add_command(run_command)
cli.add_command(runs_group)
cli.add_command(worker_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: usage errors print one line and exit 2."""
    try:
        cli.main(args=argv, prog_name="tavern-agent", standalone_mode=False)
    except click.UsageError as exc:
        say(f"tavern-agent: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        say(f"tavern-agent: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except OSError as exc:  # a full or failing disk: one line naming the file, not a traceback
        say(f"tavern-agent: error: storage failed: {exc}", err=True)
        sys.exit(1)
