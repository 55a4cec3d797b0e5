"""Submit a Ray job, print its logs, and exit with the job's outcome, whatever the log stream does.

    python jobs/submit.py --address http://HEAD:8265 --working-dir . \\
        --runtime-env jobs/runtime_env.yaml -- python jobs/run.py --config configs/s3.yaml

`ray job submit` follows the job's logs over a WebSocket and, when that stream drops (close code
1006, ray-project/ray#57002 and #60665), fails with a traceback even though the job goes on and
may succeed. Here the job is submitted without waiting, its logs are followed and the stream is
reopened when it drops (the server resends the log from the start: what was printed is skipped),
and the outcome is read from the job's status, not from the stream.

The options mean what they mean to `ray job submit` (the runtime env is built by Ray's own
parser). Exit code: 0 when the job SUCCEEDED; when it FAILED, its entrypoint's exit code if that
is known and not 0 (so `pipeline run`'s documented codes come through), else 1; 1 when it was
STOPPED; 2 for a bad command line (argparse). The job's id is printed first, on stderr, so that
`ray job status|logs|stop ID` can find it.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time

from ray.dashboard.modules.dashboard_sdk import parse_runtime_env_args
from ray.job_submission import JobStatus, JobSubmissionClient

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Exit code: 0 job succeeded; the job's own exit code (else 1) when it failed;"
        " 1 stopped; 2 bad command line.",
    )
    parser.add_argument("--address", required=True, help="the head's dashboard, http://HEAD:8265")
    parser.add_argument("--working-dir", help="local folder uploaded as the job's working dir")
    parser.add_argument("--runtime-env", help="a runtime_env YAML file")
    parser.add_argument(
        "--reconnects", type=int, default=20, help="log stream reopenings before only waiting"
    )
    parser.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    if args.entrypoint[:1] == ["--"]:
        args.entrypoint = args.entrypoint[1:]
    if not args.entrypoint:
        parser.error("the job's command is missing: put it after --")
    return args


async def follow_logs(client: JobSubmissionClient, job_id: str, reconnects: int) -> None:
    """Print the job's log as it grows; reopen the stream when it drops, print nothing twice."""
    printed = 0  # characters of the log already printed: each stream starts from the log's start
    for attempt in range(reconnects + 1):
        seen = 0
        try:
            async for chunk in client.tail_job_logs(job_id):
                new = chunk[max(0, printed - seen) :]
                seen += len(chunk)
                if new:
                    sys.stdout.write(new)
                    sys.stdout.flush()
                    printed += len(new)
            return  # the server closed the stream: the job is over
        except Exception as e:  # noqa: BLE001 - RuntimeError (1006), aiohttp errors, ...
            print(f"[submit] log stream dropped ({e}); reopening", file=sys.stderr)
            await asyncio.sleep(min(2**attempt, 10))
    print("[submit] log stream keeps dropping; waiting for the job's status", file=sys.stderr)


def wait_for_status(client: JobSubmissionClient, job_id: str) -> JobStatus:
    while (status := client.get_job_status(job_id)) not in TERMINAL:
        time.sleep(1)
    return status


def exit_code(status: JobStatus, driver_exit_code: int | None) -> int:
    if status == JobStatus.SUCCEEDED:
        return 0
    if status == JobStatus.FAILED and driver_exit_code:
        return driver_exit_code
    return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    client = JobSubmissionClient(args.address)
    runtime_env = parse_runtime_env_args(runtime_env=args.runtime_env, working_dir=args.working_dir)
    job_id = client.submit_job(
        entrypoint=shlex.join(args.entrypoint), runtime_env=runtime_env or None
    )
    print(f"[submit] job {job_id} submitted to {args.address}", file=sys.stderr)
    asyncio.run(follow_logs(client, job_id, args.reconnects))
    status = wait_for_status(client, job_id)
    info = client.get_job_info(job_id)
    code = exit_code(status, info.driver_exit_code)
    print(f"[submit] job {job_id} {status.value.lower()}; exit {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
