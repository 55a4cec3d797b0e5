"""StreamReader in a torch DataLoader, with workers, ranks and resume (needs torch).

    dataset = TorchIterableDataset(uri, seq_len=2048, rank=r, world_size=W, boundaries=True)
    loader = StreamDataLoader(dataset, batch_size=8, num_workers=2)

Contract: DataLoader worker i of rank r reads as sub-rank r * workers + i of world_size *
workers, so workers and ranks never read a window twice; the loader counts the windows of the
batches it has handed out (not those prefetched), so its state_dict() resumes exactly with the
same rank, world size and workers, and `merge_states` gives an exact job state for any change.
Batches, the state's format and resume rules: docs/reading.md, "In a torch DataLoader".
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pipeline.stream.boundaries import Window
from pipeline.stream.reader import StreamReader
from pipeline.stream.resume import STATE_FORMAT, check_state, merge_states

LOADER_FORMAT = "pipeline.stream.loader/1"


def _tensors(window: np.ndarray | Window) -> torch.Tensor | dict[str, torch.Tensor]:
    if isinstance(window, Window):
        return {
            "tokens": torch.from_numpy(window.tokens.astype(np.int64)),
            "cu_seqlens": torch.from_numpy(window.cu_seqlens),
            "position_ids": torch.from_numpy(window.position_ids),
        }
    return torch.from_numpy(window.astype(np.int64))


def collate_windows(items: list[Any]) -> Any:
    """Stack windows; with boundaries, cu_seqlens of the whole batch flattened (varlen form)."""
    if not isinstance(items[0], dict):
        return torch.stack(items)
    cu, offset = [torch.zeros(1, dtype=torch.int32)], 0
    for item in items:
        cu.append(item["cu_seqlens"][1:] + offset)
        offset += len(item["position_ids"])
    cu_seqlens = torch.cat(cu)
    return {
        "tokens": torch.stack([i["tokens"] for i in items]),
        "position_ids": torch.stack([i["position_ids"] for i in items]),
        "cu_seqlens": cu_seqlens,
        "max_seqlen": int((cu_seqlens[1:] - cu_seqlens[:-1]).max()),
    }


class TorchIterableDataset(IterableDataset):
    """StreamReader for a DataLoader: each worker reads as one sub-rank (see the module doc)."""

    def __init__(self, uri_or_location: Any, seq_len: int, **kwargs: Any):
        super().__init__()
        self._args, self._kwargs = (uri_or_location, seq_len), kwargs
        self.rank, self.world_size = kwargs.pop("rank", 0), kwargs.pop("world_size", 1)
        self._epoch = kwargs.pop("epoch", 0)
        self._states: dict[int, dict] | None = None  # sub-rank -> reader state, set by the loader
        self._tagged = False  # yield (window, (sub-rank, epoch, consumed)) for the loader

    def sub_rank(self, workers: int, worker: int) -> tuple[int, int]:
        return self.rank * workers + worker, self.world_size * workers

    def reader(self, workers: int = 1, worker: int = 0) -> StreamReader:
        rank, world = self.sub_rank(workers, worker)
        return StreamReader(
            *self._args, rank=rank, world_size=world, epoch=self._epoch, **self._kwargs
        )

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        rank, _ = self.sub_rank(workers, worker)
        with self.reader(workers, worker) as reader:
            state = (self._states or {}).get(rank)
            if state is not None:
                reader.load_state_dict(state)
            if reader.remaining() == 0:  # done with this epoch: never start the next one alone
                return
            for window in reader:
                item = _tensors(window)
                yield (item, (rank, reader.epoch, reader.consumed)) if self._tagged else item


class StreamDataLoader:
    """A DataLoader over a TorchIterableDataset that can save and restore its position."""

    def __init__(
        self, dataset: TorchIterableDataset, batch_size: int, num_workers: int = 0, **kwargs: Any
    ) -> None:
        self.dataset = copy.copy(dataset)
        self.dataset._tagged = True
        self.workers = max(num_workers, 1)
        self._kwargs = {"batch_size": batch_size, "num_workers": num_workers, **kwargs}
        self._user_collate = kwargs.pop("collate_fn", collate_windows)
        self._kwargs["collate_fn"] = self._collate
        self._kwargs.pop("persistent_workers", None)  # each pass hands workers a fresh state
        self._states = self._fresh(dataset._epoch)

    # -- states ------------------------------------------------------------------------------------
    def _fresh(self, epoch: int) -> list[dict]:
        """The state of every sub-rank of this rank at the start of `epoch`."""
        out = []
        for w in range(self.workers):
            reader = self.dataset.reader(self.workers, w)
            reader.set_epoch(epoch)
            out.append(reader.state_dict())
            reader.close()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": LOADER_FORMAT,
            "rank": self.dataset.rank,
            "world_size": self.dataset.world_size,
            "workers": self.workers,
            "states": copy.deepcopy(self._states),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") == STATE_FORMAT:
            job = state
        elif state.get("format") != LOADER_FORMAT:
            raise ValueError(f"not a {LOADER_FORMAT} or {STATE_FORMAT} state")
        elif (state["rank"], state["world_size"], state["workers"]) == (
            self.dataset.rank,
            self.dataset.world_size,
            self.workers,
        ):
            self._states = copy.deepcopy(state["states"])
            return
        else:
            job = _lockstep_job_state(state)
        check_state(job)
        states = []
        for w in range(self.workers):
            reader = self.dataset.reader(self.workers, w)
            reader.load_state_dict(job)  # checks the stream; splits the rest over the sub-ranks
            states.append(reader.state_dict())
            reader.close()
        self._states = states

    @staticmethod
    def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
        """One exact job state from every rank's loader state (a StreamReader merged state)."""
        return merge_states([s for state in states for s in state["states"]])

    # -- iteration ---------------------------------------------------------------------------------
    def _collate(self, items: list[Any]) -> Any:
        return self._user_collate([i[0] for i in items]), [i[1] for i in items]

    def __len__(self) -> int:
        raise TypeError("a stream has no length")

    def __iter__(self) -> Iterator[Any]:
        if all(self._left(s) == 0 for s in self._states):  # the epoch is done: the next one
            self._states = self._fresh(self._states[0]["epoch"] + 1)
        first = self._states[0]["rank"]
        self.dataset._states = {s["rank"]: s for s in self._states}
        loader = DataLoader(self.dataset, **self._kwargs)
        for batch, progress in loader:
            for rank, epoch, consumed in progress:
                state = self._states[rank - first]
                if epoch == state["epoch"]:
                    state["consumed"] = max(state["consumed"], consumed)
            yield batch

    def _left(self, state: dict) -> int:
        reader = self.dataset.reader(self.workers, state["rank"] - self._states[0]["rank"])
        reader.load_state_dict(state)
        left = reader.remaining()
        reader.close()
        return left


def _lockstep_job_state(state: dict[str, Any]) -> dict[str, Any]:
    """A job state from one rank's loader state, taking every rank's worker i to have consumed
    what this rank's worker i did."""
    world, workers = state["world_size"], state["workers"]
    by_worker = [s["consumed"] for s in state["states"]]
    everyone = [
        {**state["states"][0], "rank": r * workers + w, "consumed": by_worker[w]}
        for r in range(world)
        for w in range(workers)
    ]
    return merge_states(everyone)
