"""How this process joins Ray: a cluster (RAY_ADDRESS, cfg.ray.address, or a job's driver) or a
local instance, the environment its tasks get, and the start of the workers a run uses."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator

import ray

from pipeline.config.model import Config

# Parallelism comes from tasks (one CPU each), so library thread pools inside a task stay at one
# thread; otherwise every tokenizer task would start a pool as wide as the machine (OMP_NUM_THREADS
# also sizes Arrow's pool). PIPELINE_TASK_THREADS=1 holds the pipeline's own threads to one busy
# thread too: the engine encodes one batch at a time and the tokenize check runs inline
# (tokens/encode.py task_threads), so a task uses the one core it reserved.
WORKER_ENV = {
    "RAYON_NUM_THREADS": "1",
    "RAYON_RS_NUM_CPUS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "PIPELINE_TASK_THREADS": "1",
}


class _LocalAuthNotice(logging.Filter):
    """Drops one Ray notice: that a new local instance turned token authentication on, which it
    does by default and a local user can do nothing about. Every other record of that logger
    (such as the warning that authentication is off) and of every other logger passes.

    (Setting RAY_AUTH_MODE=token instead would need Ray's cached config reloaded: ray is already
    imported, and a driver that sees the variable only later fails to reach its own GCS.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_AUTH_NOTICE)


_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"
_LOCAL_AUTH_NOTICE = _LocalAuthNotice()


def hide_local_auth_notice() -> None:
    """Before a local ray.init (here and in the benchmarks): that one notice is not printed."""
    logging.getLogger(_AUTH_LOGGER).addFilter(_LOCAL_AUTH_NOTICE)


def worker_runtime_env() -> dict | None:
    """The runtime env ray.init adds for the tasks: WORKER_ENV minus what the job already sets.

    Inside a Ray job (`ray job submit --runtime-env ...`) Ray merges the job's runtime env with
    ray.init's and refuses any env var key set in both, even with equal values; so keys the job
    sets are left to the job (its value wins) and only the others are added."""
    job_env: dict = {}
    # Ray hands a job's driver its JobConfig (runtime env included) in this variable.
    if job_json := os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        job_env = (json.loads(job_json).get("runtime_env") or {}).get("env_vars") or {}
    env_vars = {k: v for k, v in WORKER_ENV.items() if k not in job_env}
    return {"env_vars": env_vars} if env_vars else None


def ensure_ray(cfg: Config) -> None:
    if ray.is_initialized():
        return
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=worker_runtime_env())
    else:
        hide_local_auth_notice()
        # A local instance's workers inherit WORKER_ENV from the raylet this ray.init spawns; as
        # a runtime env instead, the workers Ray starts with the job could not take tasks and
        # each task would wait for a worker of that env (~2-3 s before the first one).
        with _environment(WORKER_ENV):
            ray.init(  # address="local": never join a cluster some other process started here
                address="local",
                num_cpus=cfg.ray.num_cpus,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=True,
            )


def shutdown_ray() -> None:
    """ray.shutdown(), without the second it spends on a local instance's autoscaler monitor.

    ray.shutdown stops a local instance's processes one at a time, each with a second's SIGTERM
    grace; the monitor, alone of them, sleeps through its grace. It holds nothing to flush (a
    local instance is never autoscaled), so it is killed first and ray.shutdown finds it gone.
    A driver that joined a cluster holds no processes of it: nothing is killed there."""
    node = getattr(ray._private.worker, "_global_node", None)  # this process's local instance
    for info in node.all_processes.get("monitor", ()) if node is not None else ():
        if info.process.poll() is None:
            info.process.kill()
            info.process.wait(timeout=5)
    ray.shutdown()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` set while the block runs (the processes it starts keep them),
    as it was afterwards: the driver's own thread pools are not held to one thread."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_workers(kernels: bool, steps: tuple[str, ...] = ()) -> None:
    """Start the workers the first wave will use (one per CPU, up to 16) and, with `kernels`,
    load dedup's compiled loops in each, and those of the curation `steps` (compiled first
    where this machine has not yet: see dedup/kernel_cache.py), so that these seconds show as
    worker start, not as a stage's."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    ray.get([_worker_ready.remote(kernels, steps) for _ in range(max(1, min(cpus, 16)))])


@ray.remote(num_cpus=1)
def _worker_ready(kernels: bool, steps: tuple[str, ...] = ()) -> int:
    if kernels:
        from pipeline.dedup import minhash_kernel

        minhash_kernel.available()
    if steps:
        from pipeline.curate import warm

        warm.warm(steps)
    return os.getpid()
