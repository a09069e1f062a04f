"""``tavern-agent skills list`` and ``tavern-agent profile new|validate``."""

from __future__ import annotations

import json
import sys

import click

from tavern_agent.commands.options import chosen_profile, on_every_source, profile_option
from tavern_agent.config import profiles_dir, resolve_profile
from tavern_agent.core.descriptors import Scene
from tavern_agent.core.profile import Profile, ProfileError
from tavern_agent.fsutil import atomic_write
from tavern_agent.terminal import say
from tavern_agent.tools.catalog import ProfileValidationError
from tavern_agent.workspace.layout import DataRoot


@click.group("skills")
def skills_group() -> None:
    """The skills library (<data-dir>/skills/<name>/SKILL.md)."""


@skills_group.command("list")
@profile_option
@click.pass_context
def skills_list(ctx: click.Context, profile_spec: str | None) -> None:
    """List the skills a profile sees, with their front-matter descriptions."""
    data = DataRoot(ctx.obj["data_dir"])
    if profile_spec is None:
        chosen = on_every_source(
            data.path, lambda assembly: chosen_profile(assembly, None, Scene.CHAT)
        )
    else:
        try:
            chosen = resolve_profile(profile_spec, data.path)
        except ProfileError as exc:
            raise click.UsageError(str(exc)) from None
    found = data.skills(chosen)
    for skill in found:
        say(f"skills/{skill.folder}/  {skill.name}: {skill.description}".rstrip(": "))
    if not found:
        say(f"(no skills in {data.skills_dir})")


@click.group("profile")
def profile_group() -> None:
    """Create and check profiles."""


@profile_group.command("new")
@click.argument("profile_id")
@click.option("--name", default=None, help="Display name (default: the id).")
@click.pass_context
def profile_new(ctx: click.Context, profile_id: str, name: str | None) -> None:
    """Create a profile in the data dir; like every new profile it enables the shell."""
    try:
        new = Profile.new(profile_id, name)
    except ValueError as exc:
        raise click.UsageError(
            f"bad profile id {profile_id!r}: use letters, digits, '.', '_', '-'"
        ) from exc
    path = profiles_dir(ctx.obj["data_dir"]) / f"{profile_id}.json"
    if path.exists():
        raise click.UsageError(f"profile {profile_id!r} exists already: {path}")
    atomic_write(path, (json.dumps(new.to_json(), indent=2) + "\n").encode())
    say(str(path))


@profile_group.command("validate")
@click.argument("profile_spec")
@click.pass_context
def profile_validate(ctx: click.Context, profile_spec: str) -> None:
    """Check a profile against the catalog: every enabled tool and override must exist."""
    try:
        loaded = resolve_profile(profile_spec, ctx.obj["data_dir"])
        on_every_source(
            ctx.obj["data_dir"], lambda assembly: assembly.catalog.validate_profile(loaded)
        )
    except (ProfileError, ProfileValidationError) as exc:
        problems = exc.problems if isinstance(exc, ProfileValidationError) else [str(exc)]
        for problem in problems:
            say(f"error: {problem}", err=True)
        sys.exit(1)
    say(f"{loaded.id}: ok")
