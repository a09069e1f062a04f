"""`tavern-agent sillytavern install` copies the extension where SillyTavern loads it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tavern_agent.cli import cli
from tavern_agent.commands.sillytavern import extension_files

FILES = {"manifest.json", "index.js", "style.css"}


def fake_sillytavern(root: Path, config: str | None = None) -> Path:
    root.mkdir()
    (root / "server.js").write_text("// SillyTavern\n")
    if config is not None:
        (root / "config.yaml").write_text(config)
    return root


def install(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["sillytavern", "install", *args])
    return result.exit_code, result.output


def test_the_extension_is_a_third_party_extension() -> None:
    manifest = json.loads((extension_files() / "manifest.json").read_text())
    assert manifest["js"] == "index.js" and manifest["css"] == "style.css"
    assert {p.name for p in extension_files().iterdir()} == FILES


def test_install_goes_to_the_users_extensions_of_the_configured_data_root(tmp_path: Path) -> None:
    st = fake_sillytavern(tmp_path / "st", "port: 8000\ndataRoot: ./userdata  # moved\n")
    code, output = install("--st-dir", str(st), "--user", "alice")
    assert code == 0, output
    target = st / "userdata" / "alice" / "extensions" / "tavern-agent"
    assert {p.name for p in target.iterdir()} == FILES
    (target / "index.js").write_text("old")  # installing again replaces the copy
    assert install("--st-dir", str(st), "--user", "alice")[0] == 0
    assert (target / "index.js").read_bytes() == (extension_files() / "index.js").read_bytes()


def test_install_defaults_to_data_and_can_serve_every_user(tmp_path: Path) -> None:
    st = fake_sillytavern(tmp_path / "st")
    assert install("--st-dir", str(st))[0] == 0
    assert (st / "data" / "default-user" / "extensions" / "tavern-agent" / "index.js").is_file()
    assert install("--st-dir", str(st), "--all-users")[0] == 0
    shared = st / "public" / "scripts" / "extensions" / "third-party" / "tavern-agent"
    assert (shared / "manifest.json").is_file()


def test_install_refuses_a_folder_that_is_not_sillytavern_or_a_bad_user(tmp_path: Path) -> None:
    code, output = install("--st-dir", str(tmp_path))
    assert code == 2 and "no server.js" in output
    st = fake_sillytavern(tmp_path / "st")
    code, output = install("--st-dir", str(st), "--user", "../x")
    assert code == 2 and "not a user name" in output
    assert not (st / "data").exists()
