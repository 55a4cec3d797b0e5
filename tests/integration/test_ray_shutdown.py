"""How a command stops the local Ray it started (run/ray_env.py shutdown_ray): every process of
that instance is gone afterwards, and the autoscaler monitor is killed rather than waited out
for its SIGTERM grace. Real Ray, in a child process (a Ray of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from support import REPO, own_ray_env

_STOP_A_LOCAL_RAY = textwrap.dedent(
    """
    import json, os
    import ray
    from pipeline.run.ray_env import shutdown_ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    processes = {kind: [i.process for i in infos]
                 for kind, infos in ray._private.worker._global_node.all_processes.items()}
    shutdown_ray()

    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split()[2] != "Z"
        except FileNotFoundError:
            return False

    print(json.dumps({
        "kinds": sorted(processes),
        "alive": [p.pid for ps in processes.values() for p in ps if alive(p.pid)],
        "monitor_exit": [p.returncode for p in processes.get("monitor", [])],
    }))
    """
)


def test_shutdown_kills_the_monitor_and_leaves_no_process_of_the_instance() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _STOP_A_LOCAL_RAY], cwd=REPO, capture_output=True, text=True,
        env=own_ray_env(), timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"raylet", "gcs_server", "monitor"} <= set(seen["kinds"])
    assert seen["alive"] == []
    assert seen["monitor_exit"] == [-9]  # SIGKILL: not the second of SIGTERM grace it ignores
