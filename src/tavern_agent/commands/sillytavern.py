"""``tavern-agent sillytavern install``: the SillyTavern extension, copied where SillyTavern looks.

The extension (``frontends/sillytavern`` in the source tree, shipped inside
the package) is a third-party extension: SillyTavern loads one from a user's
``<dataRoot>/<user>/extensions/<name>/`` or, for every user, from
``public/scripts/extensions/third-party/<name>/`` of its own folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import click

FOLDER_NAME = "tavern-agent"
DEFAULT_USER = "default-user"
_DATA_ROOT_LINE = re.compile(r"""^dataRoot:\s*["']?([^"'#\n]+?)["']?\s*(?:#.*)?$""", re.M)


def extension_files() -> Path:
    """The extension's folder: inside the installed package, or in the source tree."""
    here = Path(__file__).resolve()
    packaged = here.parents[1] / "frontends" / "sillytavern"
    if packaged.is_dir():
        return packaged
    return here.parents[3] / "frontends" / "sillytavern"  # an editable install


def data_root(st_dir: Path) -> Path:
    """SillyTavern's data root: ``dataRoot`` of its config.yaml (relative to it), or data/."""
    config = st_dir / "config.yaml"
    if config.is_file():
        found = _DATA_ROOT_LINE.search(config.read_text(encoding="utf-8", errors="replace"))
        if found:
            return st_dir / Path(found.group(1).strip()).expanduser()
    return st_dir / "data"


def install(source: Path, target: Path) -> None:
    """Put a fresh copy of ``source`` at ``target`` (an older copy is replaced whole)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


@click.group("sillytavern")
def sillytavern_group() -> None:
    """The SillyTavern extension: SillyTavern's tools for the agent, its runs in SillyTavern."""


@sillytavern_group.command("install")
@click.option(
    "--st-dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    required=True,
    help="SillyTavern's folder (the one holding server.js).",
)
@click.option("--user", default=DEFAULT_USER, show_default=True, help="SillyTavern user.")
@click.option(
    "--data-root",
    "data_root_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="SillyTavern's data root, if it is not the dataRoot of DIR/config.yaml (or DIR/data).",
)
@click.option(
    "--all-users",
    is_flag=True,
    help="Install for every user (public/scripts/extensions/third-party/) instead.",
)
def install_command(st_dir: Path, user: str, data_root_dir: Path | None, all_users: bool) -> None:
    """Copy the extension into SillyTavern's extensions folder of USER (or of all users).

    Then reload SillyTavern, open Extensions → tavern-agent and enter serve's
    URL and token; start serve with --allow-origin set to SillyTavern's address.
    """
    if not (st_dir / "server.js").is_file():
        raise click.UsageError(f"{st_dir} is not SillyTavern's folder (no server.js there)")
    if "/" in user or "\\" in user or user in ("", ".", ".."):
        raise click.UsageError(f"--user {user!r} is not a user name")
    if all_users:
        target = st_dir / "public" / "scripts" / "extensions" / "third-party" / FOLDER_NAME
    else:
        root = data_root_dir if data_root_dir is not None else data_root(st_dir)
        target = root / user / "extensions" / FOLDER_NAME
    source = extension_files()
    if not (source / "manifest.json").is_file():
        raise click.ClickException(f"the extension's files are missing ({source})")
    install(source, target)
    click.echo(f"installed the tavern-agent extension in {target}")
    click.echo(
        "Reload SillyTavern, open Extensions → tavern-agent, enter serve's URL and token, "
        "and start serve with --allow-origin <SillyTavern's address>."
    )
