"""StreamDataLoader (stream/torch_data.py): workers and ranks, a killed loader resumed exactly."""

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pipeline.core.storage import Location  # noqa: E402
from pipeline.formats.manifest import load_manifest  # noqa: E402
from pipeline.stream.torch_data import (  # noqa: E402
    StreamDataLoader,
    TorchIterableDataset,
    collate_windows,
)
from pipeline.stream.windows import shard_order  # noqa: E402
from pipeline.testing.synthetic import write_version  # noqa: E402

L = 500
SHARDS = [30_000, 11_111, 52_345, 20_500]
READ = {"request_bytes": 8192, "inflight": 2, "shuffle_buffer_bytes": 12 * (L + 1) * 2}
REPO = Path(__file__).resolve().parents[2]

# The training loop of the child: every step writes its windows' ids and the loader's state in
# one file (atomically), as a checkpoint would. With a step count to stop at, it writes
# "paused" after that step's file and blocks (reading stdin, which the test never writes) until
# the test kills it: the kill lands at that step, however fast or slow this machine is, while
# the loader's workers keep prefetching as they would in a training loop. Without one, it runs
# to the epoch's end.
CHILD = """
import json, os, sys
from pipeline.stream.torch_data import StreamDataLoader, TorchIterableDataset
uri, out, resume, seq_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5])
read, stop_at = json.loads(sys.argv[4]), int(sys.argv[6])
loader = StreamDataLoader(TorchIterableDataset(uri, seq_len, **read), batch_size=3, num_workers=2)
step = 0
if resume != "-":
    loader.load_state_dict(json.load(open(resume))["state"])
    step = json.load(open(resume))["step"] + 1
for batch in loader:
    windows = [w.tolist()[:8] for w in batch]
    record = {"step": step, "windows": windows, "state": loader.state_dict()}
    with open(f"{out}/step.tmp", "w") as f:
        json.dump(record, f)
    os.replace(f"{out}/step.tmp", f"{out}/step-{step:05d}.json")
    step += 1
    if step == stop_at:
        print("paused", flush=True)
        sys.stdin.read()
print("epoch done", flush=True)
"""


@pytest.fixture
def version(tmp_path):
    return write_version(Location.from_uri(str(tmp_path)) / "ds", SHARDS, seed=11)


def window_ids(version):
    """First 8 tokens of each window -> window id (random tokens: distinct)."""
    shards = load_manifest(version)["shards"]
    stream = np.concatenate(
        [
            np.fromfile(f"{version.path}/{shards[k]['bin']}", np.uint16)
            for k in shard_order(len(shards), 0, 0)
        ]
    )
    ids = {tuple(stream[j * L : j * L + 8].tolist()): j for j in range((len(stream) - 1) // L)}
    assert len(ids) == (len(stream) - 1) // L
    return ids


def steps(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("step-*.json"))]


def run_child(version, out: Path, resume: str, kill_at: int | None):
    """Run the training loop; with `kill_at`, SIGKILL it once it has written step `kill_at`'s
    file and paused there (it says so on stdout)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stop_at = str(kill_at if kill_at is not None else -1)
    args = [sys.executable, "-c", CHILD, version.uri, str(out), resume, json.dumps(READ), str(L)]
    proc = subprocess.Popen(
        [*args, stop_at],
        env=env,
        start_new_session=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        if kill_at is None:
            assert b"epoch done" in proc.communicate(timeout=600)[0]
            return
        said = proc.stdout.readline()  # blocks until the child pauses (or exits: b"")
        assert said == b"paused\n", f"the child ended before step {kill_at}: {said!r}"
        os.killpg(proc.pid, signal.SIGKILL)  # the loader and its two workers, mid-epoch
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_killed_two_worker_loader_resumes_without_loss_or_repeat(version, tmp_path):
    ids = window_ids(version)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    run_child(version, first, "-", kill_at=7)
    before = steps(first)
    last = sorted(first.glob("step-*.json"))[-1]
    assert [s["step"] for s in before] == list(range(7))  # killed at step 7, mid-epoch
    run_child(version, second, str(last), kill_at=None)
    assert steps(second)[0]["step"] == 7
    seen = Counter(ids[tuple(w)] for s in before + steps(second) for w in s["windows"])
    assert set(seen) == set(ids.values()) and max(seen.values()) == 1


def test_workers_and_ranks_split_the_epoch(version):
    ids = window_ids(version)
    seen = Counter()
    for rank in range(2):
        dataset = TorchIterableDataset(version.uri, L, rank=rank, world_size=2, **READ)
        loader = StreamDataLoader(dataset, batch_size=4, num_workers=2)
        for batch in loader:
            assert batch.dtype == torch.int64 and batch.shape[1] == L + 1
            seen.update(ids[tuple(w[:8].tolist())] for w in batch)
    assert set(seen) == set(ids.values()) and max(seen.values()) == 1


def test_loader_state_resumes_on_another_worker_count(version):
    ids = window_ids(version)
    loader = StreamDataLoader(TorchIterableDataset(version.uri, L, **READ), 3, num_workers=2)
    seen = Counter()
    for i, batch in enumerate(loader):
        seen.update(ids[tuple(w[:8].tolist())] for w in batch)
        if i == 5:
            break
    state = json.loads(json.dumps(loader.state_dict()))
    more = StreamDataLoader(TorchIterableDataset(version.uri, L, **READ), 3, num_workers=1)
    more.load_state_dict(state)
    for batch in more:
        seen.update(ids[tuple(w[:8].tolist())] for w in batch)
    assert set(seen) == set(ids.values()) and max(seen.values()) == 1
    assert more.state_dict()["states"][0]["epoch"] == 0
    next(iter(more))  # the next loop is the next epoch
    assert more.state_dict()["states"][0]["epoch"] == 1


def test_boundaries_collate_to_varlen_form(version):
    eos = load_manifest(version)["tokenizer"]["eos_id"]
    dataset = TorchIterableDataset(version.uri, L, boundaries=True, **READ)
    batch = next(iter(StreamDataLoader(dataset, batch_size=4)))
    tokens, cu = batch["tokens"], batch["cu_seqlens"].tolist()
    assert tokens.shape == (4, L + 1) and batch["position_ids"].shape == (4, L)
    flat = tokens[:, :-1].reshape(-1)
    # a document starts at each batch row and after each EOS of the flattened inputs
    after_eos = [i + 1 for i in (flat == eos).nonzero().view(-1).tolist() if (i + 1) % L]
    starts = sorted({*range(0, 4 * L, L), *after_eos})
    assert cu == starts + [4 * L]
    assert batch["max_seqlen"] == max(b - a for a, b in zip(cu, cu[1:], strict=False))
    assert collate_windows([tokens[0], tokens[1]]).shape == (2, L + 1)
