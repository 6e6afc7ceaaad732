"""OSWorld: a real desktop per episode, OSWorld's task format, evaluators, observations and actions.

- `desktop/`: what runs inside a desktop with its system python3 (standard library, pyatspi,
  python-xlib, PIL): the X session, the control server speaking OSWorld's in-VM protocol, the
  accessibility tree as OSWorld's XML.
- `desktop_client`: `DesktopClient`, the async client of that control server.
- `backends`: starting desktops, `local` (on this host's Xvfb) or `docker` (a container each).
- `tasks`, `config_steps`, `evaluator`: OSWorld's task JSON, its config steps, its getters and metrics.
- `actions`, `observations`: OSWorld's action spaces and observation types.
- `env`: the Env protocol over all of it (`providers`: roost's desktops, or OSWorld's own
  DesktopEnv in `official`); `cli`: `roost envs osworld ...`.

This package and `desktop/` import nothing at import time: the desktop runs
`python3 -m roost.envs.osworld.desktop.server` with only the system python's packages.
"""
