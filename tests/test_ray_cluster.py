"""The simulated Ray cluster the multi-node tests use: its nodes are separate as machines are for
files (a path one node writes is not there on another) and joined as a cluster is (the object
store carries data between them), and it leaves no process behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from roost.tests.ray_cluster import NodeProbe, NodeSpec, SimulatedCluster, mount_namespace, unavailable


@pytest.mark.timeout(600)  # the nodes start slowly on a loaded machine
def test_a_path_written_on_one_node_is_not_on_another_while_the_object_store_carries_data():
    if reason := unavailable():
        pytest.skip(f"no simulated Ray cluster: {reason}")
    import ray

    root = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    with SimulatedCluster(root, [NodeSpec("a", cpus=1), NodeSpec("b", cpus=1)]) as cluster:
        files = ray.remote(NodeProbe)
        on_a = files.options(num_cpus=0, resources={"roost_node_a": 0.01}).remote()
        on_b = files.options(num_cpus=0, resources={"roost_node_b": 0.01}).remote()
        assert ray.get(on_a.node.remote()) != ray.get(on_b.node.remote())
        path = str(cluster.run_dir / "checkpoint.txt")
        assert ray.get(on_a.write.remote(path, "weights v1")) == "weights v1"
        with pytest.raises(ray.exceptions.RayTaskError) as exc:
            ray.get(on_b.read.remote(path))
        assert isinstance(exc.value.as_instanceof_cause(), FileNotFoundError)
        assert not Path(path).exists()  # nor on the driver's side: the folder under both tmpfs
        # what node a hands over through Ray arrives on node b
        payload = ray.get(on_a.read.remote(path))
        assert ray.get(on_b.take.remote([ray.put(payload.encode() * 1000)])) == b"weights v1" * 1000
        namespaces = cluster.namespaces
        assert len(namespaces) == 2 and mount_namespace(os.getpid()) not in namespaces
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and mount_namespace(int(pid)) in namespaces]
    assert left == [], f"processes left in the nodes' namespaces: {left}"
    shutil.rmtree(root, ignore_errors=True)
