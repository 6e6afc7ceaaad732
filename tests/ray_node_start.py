"""`ray start` for the simulated cluster's nodes (`ray_cluster.py`), run as a script:
`python ray_node_start.py --block --num-cpus 1 ...` takes `ray start`'s own flags.

Two differences, both about time on a loaded two-core CI machine:

- A raylet waits about 15 s for its dashboard agent to write its port files, and aborts without
  them; the agent (a Python process importing Ray) took longer than that here. This install's
  agent is minimal (no `aiohttp_cors`), and a minimal agent writes -1 (not in use) to the three
  dashboard port files, so they are written first, before the raylet starts; the runtime-env
  agent's file gets the port `--runtime-env-agent-port` tells it to bind.
- `ray start` gives a new raylet 30 seconds (a constant in `ray._private.node`) to register with
  the head; here the wait is `ROOST_RAY_NODE_WAIT_S`."""

from __future__ import annotations

import inspect
import os
import sys
import time

import ray._private.services as services
from ray._raylet import (
    DASHBOARD_AGENT_LISTEN_PORT_NAME,
    METRICS_AGENT_PORT_NAME,
    METRICS_EXPORT_PORT_NAME,
    RUNTIME_ENV_AGENT_PORT_NAME,
    persist_port,
)
from ray.scripts.scripts import main

_get_node = services.get_node
_start_raylet = services.start_raylet


def _patient_get_node(*args, **kwargs):
    deadline = time.monotonic() + float(os.environ.get("ROOST_RAY_NODE_WAIT_S", "180"))
    while True:
        try:
            return _get_node(*args, **kwargs)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _start_raylet_with_ports(*args, **kwargs):
    given = inspect.signature(_start_raylet).bind(*args, **kwargs).arguments
    session_dir, node_id = given["session_dir"], given["node_id"]
    for name in (METRICS_AGENT_PORT_NAME, METRICS_EXPORT_PORT_NAME, DASHBOARD_AGENT_LISTEN_PORT_NAME):
        persist_port(session_dir, node_id, name, -1)
    if given.get("runtime_env_agent_port"):
        persist_port(session_dir, node_id, RUNTIME_ENV_AGENT_PORT_NAME, given["runtime_env_agent_port"])
    return _start_raylet(*args, **kwargs)


if __name__ == "__main__":
    services.get_node = _patient_get_node
    services.start_raylet = _start_raylet_with_ports
    sys.argv = ["ray", "start", *sys.argv[1:]]
    main()
