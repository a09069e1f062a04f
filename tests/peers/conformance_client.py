"""Our client for the MCP conformance suite (``@modelcontextprotocol/conformance``).

The suite starts a test server per scenario and runs this script with the
server's URL as the last argument, the scenario in ``MCP_CONFORMANCE_SCENARIO``
and any pre-registered credentials in ``MCP_CONFORMANCE_CONTEXT``. It drives the
tavern-agent CLI as a person would, in a fresh data root: ``mcp add``,
``mcp login`` for the ``auth/*`` scenarios (the "browser" follows the
authorization server's redirect back to the CLI's loopback listener),
``mcp discover``, ``mcp allow --all`` and a ``call`` of every discovered tool,
with ``--mcp-ask allow`` so a server's elicitation is accepted with its defaults.
A call answered ``mcp.login_required`` (the tool needs more scope) is followed,
as the result says, by ``mcp login`` and the call once more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ARGUMENTS = {"add_numbers": {"a": 5, "b": 3}}
# An HTTPS client id metadata document URL for the scenario that tests it; the
# suite's authorization server accepts it without fetching it.
METADATA_URL = "https://conformance-test.local/client-metadata.json"
FETCH = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1]).read()"


def run(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    sys.stderr.write(f"$ {' '.join(args[3:])}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(args[3:])}")
    return done.stdout


def main() -> None:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as data:
        cli = (sys.executable, "-m", "tavern_agent", "--data-dir", data)
        run(*cli, "mcp", "add", "conf", "--url", url)
        login = ["mcp", "login", "conf"]
        browser = {**os.environ, "BROWSER": f'{sys.executable} -c "{FETCH}" %s'}
        if scenario.startswith("auth/"):
            if "client_id" in context:
                login += ["--client-id", context["client_id"]]
            if "client_secret" in context:
                login += ["--client-secret", context["client_secret"]]
            if scenario == "auth/basic-cimd":
                login += ["--client-metadata-url", METADATA_URL]
            run(*cli, *login, env=browser)
        discovered = run(*cli, "mcp", "discover", "conf")  # "    off    NAME" per tool
        tools = [line.split()[1] for line in discovered.splitlines() if line.startswith("    off ")]
        if tools:
            run(*cli, "mcp", "allow", "conf", "--all")
        for tool in tools:
            arguments = json.dumps(ARGUMENTS.get(tool, {}))
            call = (*cli, "call", "--mcp-ask", "allow", f"mcp__conf__{tool}", arguments)
            if "[mcp.login_required]" in run(*call):
                run(*cli, *login, env=browser)
                run(*call)


if __name__ == "__main__":
    main()
