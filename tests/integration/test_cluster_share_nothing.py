"""Share-nothing nodes: a job submitted as docs/cluster.md says to a head and two worker nodes
that share no network, temp dir or shared memory (pipeline/testing/netns.py), only S3.

Each node is a network namespace on a test bridge with private tmpfs mounts on /tmp (Ray's temp
dir, the job's working dir) and /dev/shm (its object store); SeaweedFS listens on the host's
bridge address. The head has no CPU, so every task runs on a worker node. The reference is the
same job on one worker node; then a second worker joins, the job is submitted again, and one
worker node is SIGKILLed (every process of its namespace) while it runs a read+hash task: the
job must still succeed, with the reference's shards byte for byte. The kill lands on a state, not
on a poll's luck: the second job reads through a fault proxy that holds the first GET of one
input until the node that sent it is killed. Needs root, `ip` and `unshare`
(CI has them: .ci/run): without them it fails, naming what is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO
from test_cluster import VENV_BIN, ray_env, ray_tmpdir  # noqa: F401 - ray_tmpdir: a fixture

from pipeline.config.sections import StorageConfig
from pipeline.core.storage import Location
from pipeline.formats.manifest import load_manifest
from pipeline.formats.run_stats import parse_stats
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import comparable, resolve_version
from pipeline.testing.fault_proxy import FaultPlan, FaultProxy, Hold
from pipeline.testing.netns import Bridge, Node
from pipeline.testing.s3 import dummy_aws_env, seaweedfs_server

pytestmark = pytest.mark.cluster  # Ray nodes of its own (`ray start`): slow too (conftest.py)

# the sample in small units and shards, so that every stage has tasks to spread
SETS = ["ingest.unit_bytes=512KiB", "pack.shard_bytes=1MiB", "dedup.partitions=2"]
# the head declares a killed node dead within ~3 s (default ~30 s)
FAST_DEATH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
# a node's processes may start slowly on a loaded 2-core machine (Ray's defaults: 30 s)
SLOW_START = {"RAY_raylet_start_wait_time_s": "300", "RAY_agent_register_timeout_ms": "300000"}
# ahead of the suite's other test processes (`-n`), so that a node's agents report within the
# raylet's limit; its Ray workers still run at Ray's niceness above this
PRIORITY = ["nice", "-n", "-10"]
KILL_DURING = "ray::read_unit_task"  # the process title of a Ray worker running read+hash
HELD_KEY = r"/raw-bucket/corpus/web/part-0000\.jsonl$"  # the largest input: read by read+hash
# The hold ends when the killed node's connection closes; its own limit and the job's read
# timeout only stop a hang (far beyond any machine's speed).
HOLD_SECONDS = 600.0
READ_TIMEOUT = "storage.read_timeout=1200"
ONE_NODE, CLUSTER = "s3://datasets-bucket/one-node/", "s3://datasets-bucket/tokenized/"
GCS_PORT, DASHBOARD_PORT = 6379, 8265  # Ray's defaults: each node has a network of its own
# each node's agent ports, fixed like the GCS's (no other process shares a node's network)
AGENT_PORTS = [
    "--dashboard-agent-listen-port=52365",
    "--dashboard-agent-grpc-port=52366",
    "--runtime-env-agent-port=52367",
    "--metrics-export-port=52368",
]


def ray_node(bridge: Bridge, url: str, log: Path, *args: str, node: Node | None = None) -> Node:
    """`ray start --block ARGS` in a namespace on the bridge (a new one unless `node`), Ray's temp
    dir and HOME on the node's private /tmp; returns once the head at `url` lists it alive.

    A raylet gives up after 15 s when the node's agents have not reported their ports (Ray's
    fixed limit; on a loaded machine the agents take longer): then the node's processes are
    killed and it is started again, up to three times."""
    node = node or bridge.node()
    env = {**ray_env("/tmp"), **FAST_DEATH, **SLOW_START, "HOME": "/tmp"}
    argv = [
        *PRIORITY, str(VENV_BIN / "ray"), "start", "--block", f"--node-ip-address={node.ip}",
        "--temp-dir=/tmp/ray", "--disable-usage-stats", "--object-store-memory=200000000",
        *AGENT_PORTS, *args,
    ]  # fmt: skip
    for attempt in range(1, 4):
        attempt_log = log.with_name(f"{log.stem}-{attempt}.log")
        start = bridge.spawn(node, argv, env, attempt_log)
        if _alive_or_raylet_died(bridge, node, url, start, timeout=300):
            return node
        print(f"{node.ip}: the node's Ray died while starting (attempt {attempt} of 3)")
        bridge.kill(node)
    raise RuntimeError(f"node {node.ip} did not start in 3 attempts:\n{attempt_log.read_text()}")


def _alive_or_raylet_died(
    bridge: Bridge, node: Node, url: str, start: subprocess.Popen, timeout: float
) -> bool:
    """True once the head lists `node` alive; False if its raylet came and went first, or
    `ray start --block` (`start`) ended."""
    from ray.util.state import list_nodes
    from ray.util.state.exception import RayStateApiException

    deadline, seen, missing = time.monotonic() + timeout, False, 0
    while time.monotonic() < deadline:
        if start.poll() is not None:
            return False
        raylet = any("raylet/raylet" in cmd for cmd in bridge.pids(node).values())
        seen |= raylet
        missing = 0 if raylet else missing + 1
        if seen and missing >= 6:  # gone for ~3 s, not just missed by one look at /proc
            return False
        with contextlib.suppress(RayStateApiException):  # still starting, or busy: ask again
            if any(
                n.node_ip == node.ip and n.state == "ALIVE"
                for n in list_nodes(address=url, timeout=10)
            ):
                return True
        time.sleep(0.5)
    raise TimeoutError(f"node {node.ip} did not join within {timeout} s")


def head_node(bridge: Bridge, log: Path) -> tuple[Node, str]:
    """The head, with no CPU (every task runs on a worker node); (node, dashboard URL)."""
    head = bridge.node()
    url = f"http://{head.ip}:{DASHBOARD_PORT}"
    ray_node(
        bridge, url, log, "--head", "--num-cpus=0", f"--port={GCS_PORT}",
        "--include-dashboard=true", "--dashboard-host=0.0.0.0",
        f"--dashboard-port={DASHBOARD_PORT}", node=head,
    )  # fmt: skip
    return head, url


def worker_node(bridge: Bridge, head: Node, url: str, log: Path) -> Node:
    """A worker node with one CPU, joined to the head."""
    return ray_node(bridge, url, log, f"--address={head.ip}:{GCS_PORT}", "--num-cpus=1")


def kill_the_holding_node(
    bridge: Bridge, nodes: list[Node], proxy: FaultProxy, title: str, job: subprocess.Popen
):
    """Once the proxy holds a node's GET of an input (a read+hash task mid-unit, held until its
    connection closes), SIGKILL every process of that node; returns (node, pid of its process
    titled `title`, pids killed, seconds since the call) or None if the job ended first."""
    started = time.monotonic()
    while job.poll() is None:
        held_by = {ip for ip, _ in list(proxy.holding)}
        for node in (n for n in nodes if n.ip in held_by):
            running = [pid for pid, cmd in bridge.pids(node).items() if cmd.startswith(title)]
            return node, running[:1], bridge.kill(node), time.monotonic() - started
        time.sleep(0.02)
    return None


def submit(url: str, env: dict, sets: list[str], log: Path, *extra: str) -> subprocess.Popen:
    """docs/cluster.md's run submission (the air-gapped runtime env: the nodes have no index)."""
    argv = [
        sys.executable, str(REPO / "jobs/submit.py"), "--address", url,
        "--working-dir", ".", "--runtime-env", "jobs/runtime_env.image.yaml",
        "--", "python", "jobs/run.py", "--config", "configs/s3.yaml", *extra,
        *(arg for s in sets for arg in ("--set", s)),
    ]  # fmt: skip
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def finished(job: subprocess.Popen, log: Path, timeout: float = 400) -> str:
    """The job's log once submit.py has exited (killed if it outlives `timeout`)."""
    try:
        job.wait(timeout=timeout)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    return log.read_text(errors="replace")


def committed(dataset: Location) -> tuple[Location, dict, object]:
    """The dataset's newest version (verified), its manifest and its run's stats.json."""
    version = resolve_version(dataset)
    verify_version(version)
    (stats_key,) = dataset.fs.glob(f"{dataset.path}/_work/runs/*/stats.json")
    return version, load_manifest(version), parse_stats(dataset.fs.cat_file(stats_key))


def shard_digests(version: Location, manifest: dict) -> list[str]:
    return [
        hashlib.sha256((version / s[k]).read_bytes()).hexdigest()
        for s in manifest["shards"]
        for k in ("bin", "idx")
    ]


def print_nodes(title: str, stats) -> dict[str, dict[str, int]]:
    """Per stage, the tasks each node ran (stats.json); printed as the test's evidence."""
    print(title)
    for stage in stats.stages:
        on = dict(sorted((stage.nodes or {}).items()))
        print(f"  {stage.stage:<10} {stage.tasks:>3} tasks, on {on}")
    return {s.stage: s.nodes or {} for s in stats.stages if s.tasks}


def test_share_nothing_nodes_give_the_one_node_bytes_with_a_node_killed_mid_read(
    ray_tmpdir,  # noqa: F811 - the fixture
    tmp_path,
):
    hidden = [str(p) for p in (VENV_BIN, REPO) if Path("/tmp") in p.resolve().parents]
    if hidden:  # a node mounts a tmpfs of its own on /tmp: it would not see them
        pytest.fail(f"{hidden} under /tmp, which each node replaces: check out outside /tmp")
    with dummy_aws_env(), Bridge() as bridge, seaweedfs_server(ip=bridge.host_ip) as endpoint:
        storage = StorageConfig(endpoint_url=endpoint)
        fs = Location.from_uri("s3://raw-bucket", storage).fs
        for bucket in ("raw-bucket", "datasets-bucket"):
            fs.mkdir(bucket)
        fs.put(str(REPO / "sample") + "/", "raw-bucket/corpus/", recursive=True)
        sets = [*SETS, f"storage.endpoint_url={endpoint}"]
        head, url = head_node(bridge, tmp_path / "head.log")
        env = ray_env(ray_tmpdir)  # submit.py's, on the host
        # Reference: the same job with one worker node, output to a dataset of its own.
        first = worker_node(bridge, head, url, tmp_path / "worker1.log")
        log = tmp_path / "one.log"
        one_log = finished(submit(url, env, sets, log, "--output", ONE_NODE), log)
        assert "succeeded" in one_log, one_log[-6000:]

        second = worker_node(bridge, head, url, tmp_path / "worker2.log")
        log = tmp_path / "job.log"
        # the job's requests cross a fault proxy on the bridge that holds the first GET of the
        # largest input until the node that sent it is killed (its connection then closes)
        hold = FaultPlan(holds=(Hold(HELD_KEY, HOLD_SECONDS),))
        with FaultProxy(endpoint, hold, host=bridge.host_ip) as proxy:
            proxied = [*SETS, f"storage.endpoint_url={proxy.endpoint}", READ_TIMEOUT]
            job = submit(url, env, proxied, log)
            try:
                kill = kill_the_holding_node(bridge, [first, second], proxy, KILL_DURING, job)
            finally:
                job_log = finished(job, log)
        assert kill is not None, f"no {KILL_DURING} seen on a worker node:\n{job_log[-4000:]}"
        killed, task_pids, pids, after = kill
        print(
            f"\nSIGKILL {after:.1f} s after submitting: every process of node {killed.ip}"
            f" (namespace {killed.name}), whose GET the proxy held, running {KILL_DURING} as"
            f" pid {task_pids}; pids killed: {pids}"
        )
        assert task_pids, f"the node whose GET was held ran no {KILL_DURING}"
        workers = "".join(p.read_text()[-2000:] for p in sorted(tmp_path.glob("worker*.log")))
        assert job.returncode == 0, job_log[-6000:] + workers
        assert "succeeded" in job_log
        survivor = second if killed is first else first
        assert bridge.pids(killed) == {} and bridge.pids(survivor)

        one, one_manifest, one_stats = committed(Location.from_uri(ONE_NODE + "corpus", storage))
        version, manifest, stats = committed(Location.from_uri(CLUSTER + "corpus", storage))
        ours, reference = shard_digests(version, manifest), shard_digests(one, one_manifest)

    assert not any(Path("/run/netns", n.name).exists() for n in (head, first, second))
    alone = print_nodes(f"one worker node ({first.ip}):", one_stats)
    ran = print_nodes(f"two worker nodes, {killed.ip} killed during read+hash:", stats)
    # Every stage's tasks ran on the worker nodes (the head has no CPU), each task counted once.
    assert {"list", "read+hash", "exact", "select", "pack"} <= set(ran), ran
    assert all(set(on) == {first.ip} for on in alone.values()), alone
    for stage, on in ran.items():
        assert on and set(on) <= {first.ip, second.ip}, (stage, on)
    assert all(sum(ran[s.stage].values()) == s.tasks for s in stats.stages if s.tasks), stats.stages
    assert set(ran["pack"]) == {survivor.ip}, ran["pack"]  # after the kill: the survivor alone

    for digest in ours:
        print(f"shard sha256 {digest}")
    assert ours == reference
    assert comparable(manifest) == comparable(one_manifest)
