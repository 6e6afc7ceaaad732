"""The versions of the applications a desktop runs, as they report them.

    python3 -m roost.envs.osworld.desktop.versions     # {"chromium": "156.0.8078.114", ...}

The control server answers them at `GET /versions`; the env server reports them in `/info` and
in each episode's info, so a task that breaks after an update names what changed. Standard
library only: it runs inside the desktop on the system python3, and on the host.
"""

from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

from .session import CHROMIUM

VERSION_COMMANDS = {
    "chromium": [CHROMIUM, "--version"],
    "libreoffice": ["soffice", "--version"],
    "mousepad": ["mousepad", "--version"],
    # LXTerminal prints its version only with a display to open, Xvfb only by starting a server.
    "lxterminal": ["dpkg-query", "--show", "--showformat=${Version}", "lxterminal"],
    "xvfb": ["dpkg-query", "--show", "--showformat=${Version}", "xvfb"],
    "openbox": ["openbox", "--version"],
}
VERSION = re.compile(r"\d+(?:\.\d+)+")
OSWORLD_APPS = {
    "chrome": "chromium",
    "libreoffice_calc": "libreoffice",
    "libreoffice_writer": "libreoffice",
    "libreoffice_impress": "libreoffice",
    "mousepad": "mousepad",
    "os": "lxterminal",
}
"""OSWorld's domain (and `related_apps`) names → the application here whose version stands for them."""


def application_versions(env: dict[str, str] | None = None, timeout_s: float = 20.0) -> dict[str, str]:
    """Application name → its version (`156.0.8078.114`); an application not installed is left out."""
    with ThreadPoolExecutor(len(VERSION_COMMANDS)) as pool:
        found = dict(
            zip(VERSION_COMMANDS, pool.map(lambda argv: _version(argv, env, timeout_s), VERSION_COMMANDS.values()))
        )
    return {name: version for name, version in found.items() if version}


def _version(argv: list[str], env: dict[str, str] | None, timeout_s: float) -> str | None:
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = VERSION.search(done.stdout) if done.returncode == 0 else None
    return match.group(0) if match else None


if __name__ == "__main__":
    print(json.dumps(application_versions()))
