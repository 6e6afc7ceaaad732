"""`ray start` for the simulated cluster's nodes (`ray_cluster.py`), run as a script:
`python ray_node_start.py --block --num-cpus 1 ...` takes `ray start`'s own flags.

The one difference: `ray start` gives a new raylet 30 seconds to register with the head (a
constant in `ray._private.node`), and a raylet waits for its dashboard agent first, which on a
loaded two-core CI machine takes longer than that. Here the wait is `ROOST_RAY_NODE_WAIT_S`."""

from __future__ import annotations

import os
import sys
import time

import ray._private.services as services
from ray.scripts.scripts import main

_get_node = services.get_node


def _patient_get_node(*args, **kwargs):
    deadline = time.monotonic() + float(os.environ.get("ROOST_RAY_NODE_WAIT_S", "180"))
    while True:
        try:
            return _get_node(*args, **kwargs)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


if __name__ == "__main__":
    services.get_node = _patient_get_node
    sys.argv = ["ray", "start", *sys.argv[1:]]
    main()
