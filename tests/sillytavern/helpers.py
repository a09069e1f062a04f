"""Real SillyTavern (npm ``sillytavern``, installed under tests/peers/) for the tests.

1.19.0 (tests/peers/sillytavern) and 1.12.6, the last release before
ToolManager (tests/peers/sillytavern-1.12). Each start gets its own data root
on a free loopback port, with no login (whitelist mode, loopback only) and
nothing fetched from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.ext_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "peers"
ST_DIR = PEERS / "sillytavern" / "node_modules" / "sillytavern"
LEGACY_DIR = PEERS / "sillytavern-1.12" / "node_modules" / "sillytavern"
NODE = PEERS / "node_modules" / ".bin" / "node"  # the peers' pinned Node
USER = "default-user"
CONFIG = """\
dataRoot: {data}
listen: false
port: {port}
protocol: {{ipv4: true, ipv6: false}}
whitelistMode: true
whitelist: ["127.0.0.1", "::1"]
whitelistDockerHosts: false
basicAuthMode: false
enableUserAccounts: false
browserLaunch: {{enabled: false}}
heartbeatInterval: 0
skipContentCheck: false
enableDownloadableTokenizers: false
logging: {{enableAccessLog: false, minLogLevel: 2}}
extensions: {{enabled: true, autoUpdate: false, models: {{autoDownload: false}}}}
backups: {{chat: {{enabled: false}}}}
thumbnails: {{enabled: false}}
"""


@dataclass
class SillyTavern:
    url: str  # http://127.0.0.1:<port>
    data_root: Path
    process: subprocess.Popen[bytes]
    st_dir: Path

    @property
    def extensions(self) -> Path:
        """The user's third-party extensions folder."""
        return self.data_root / USER / "extensions"

    @property
    def version(self) -> str:
        return str(json.loads((self.st_dir / "package.json").read_text())["version"])


def prepare(root: Path) -> tuple[list[str], Path, int]:
    """1.19's arguments: a config and an empty data root under ``root``."""
    data = root / "data"
    (data / USER / "extensions").mkdir(parents=True)
    # Webpack's bundle of SillyTavern's libraries takes ~40 s to build; every data root
    # shares the one cache kept beside the installed package.
    cache = ST_DIR / "dist" / "_webpack"
    cache.mkdir(parents=True, exist_ok=True)
    (data / "_webpack").symlink_to(cache, target_is_directory=True)
    port = free_port()
    config = root / "config.yaml"
    config.write_text(CONFIG.format(data=json.dumps(str(data)), port=port))
    return ["--configPath", str(config)], data, port


def prepare_legacy(root: Path) -> tuple[list[str], Path, int]:
    """1.12.6's arguments (it reads only its own config.yaml): the same settings as flags."""
    data = root / "data"
    (data / USER / "extensions").mkdir(parents=True)
    port = free_port()
    flags = ["--port", str(port), "--dataRoot", str(data), "--listen", "false"]
    return [*flags, "--whitelist", "true", "--autorun", "false"], data, port


@contextmanager
def sillytavern(root: Path, log: Path, st_dir: Path = ST_DIR) -> Iterator[SillyTavern]:
    """SillyTavern (of ``st_dir``) serving ``root``'s data on a free port until the block ends."""
    if not (st_dir / "server.js").is_file():
        peer = st_dir.parents[1]  # make's test setup installs it
        raise RuntimeError(f"SillyTavern is not installed: run `npm ci --prefix {peer}`")
    arguments, data, port = prepare_legacy(root) if st_dir == LEGACY_DIR else prepare(root)
    node = str(NODE) if NODE.exists() else "node"
    # Outside any git work tree, SillyTavern's version (and its webpack cache key) is stable.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(st_dir.parent)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [node, "server.js", *arguments],
            cwd=st_dir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a first start builds the webpack bundle
        while True:
            if process.poll() is not None:
                raise RuntimeError("SillyTavern exited:\n" + log.read_text(errors="replace"))
            try:
                with urllib.request.urlopen(url + "/", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("SillyTavern did not start:\n" + log.read_text(errors="replace"))
            time.sleep(0.3)
        yield SillyTavern(url, data, process, st_dir)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
