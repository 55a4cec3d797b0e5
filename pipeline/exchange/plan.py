"""The cut of an exchange: N parts in K buckets of consecutive parts, W writers in G groups.

Pass 1 runs one task per (group, bucket); pass 2 reads each part's section of the G objects
of its bucket (format and request counts: exchange/sections.py). K and G follow the writers'
and parts' sizes, not the corpus, so that requests stay linear in the data until one pass-1
task would move more than a cap (`capped_cut`). A small exchange, where bytes alone would give
fewer pass-1 tasks than the stage's other waves (`min_tasks`), gets more tasks while each pass
adds at most SMALL_GETS GETs (`floored_cut`); one of at most SMALL_GETS GETs in all runs in
one pass (`direct`). Both bounds are constants: requests stay linear in the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# GETs a small exchange may spend to save a wave: below it an exchange reads the writers'
# objects directly (one wave fewer, no pass-1 object), and a pass 1 of too few tasks is cut
# finer. At 50 ms a GET and a reader task per part, a few hundred GETs cost less than one
# pass-1 wave's driver round trip and its single-task wait.
SMALL_GETS = 512


@dataclass(frozen=True)
class ExchangePlan:
    """N `parts` cut into `buckets`, the writers into `groups` (pack's PackPlan adds its own)."""

    parts: int
    buckets: int
    groups: int

    def bucket_parts(self, bucket: int) -> range:
        k, n = self.buckets, self.parts
        return range(bucket * n // k, (bucket + 1) * n // k)

    def bucket_of(self, part: int) -> int:
        return next(k for k in range(self.buckets) if part in self.bucket_parts(k))

    def unit_groups(self, writers: list) -> list[list]:
        n, g = len(writers), self.groups
        return [writers[i * n // g : (i + 1) * n // g] for i in range(g)]

    @property
    def name(self) -> str:
        """The folder of the exchange's pass-1 objects: a new cut never reuses another's."""
        return f"s{self.parts}-k{self.buckets}-g{self.groups}"


def exchange_plan(
    parts: int,
    writers: int,
    total_bytes: int,
    request_bytes: int,
    task_bytes: int | None = None,
    reads: int = 1,
    min_tasks: int = 1,
    small_gets: int = SMALL_GETS,
) -> ExchangePlan:
    """The cut of one exchange of `total_bytes` from `writers` into `parts`:
    K = clamp(writer bytes / request_bytes, 1, N) and G = clamp(part bytes / request_bytes,
    1, W), so that both passes move pieces of at least request_bytes where the sizes allow.

    `task_bytes` caps what one pass-1 task moves (capped_cut): past it requests grow as
    sqrt(W·N·D / task_bytes), not W·N; below it (every benchmark size) they stay linear.
    `min_tasks` (the stage's partitions) floors the pass-1 task count within `small_gets`
    (floored_cut)."""
    writers, total_bytes = max(1, writers), int(total_bytes)
    buckets = max(1, min(parts, int(total_bytes / writers // request_bytes)))
    groups = max(1, min(writers, int(total_bytes / max(1, parts) // request_bytes)))
    buckets, groups = capped_cut(buckets, groups, parts, writers, total_bytes, task_bytes, reads)
    buckets, groups = floored_cut(buckets, groups, parts, writers, min_tasks, reads, small_gets)
    return ExchangePlan(parts, buckets, groups)


def floored_cut(
    buckets: int,
    groups: int,
    parts: int,
    writers: int,
    min_tasks: int,
    reads: int = 1,
    small_gets: int = SMALL_GETS,
) -> tuple[int, int]:
    """(K, G) raised towards G·K >= min_tasks, so that the workers are not left waiting on one
    pass-1 task: groups first (each adds reads·N pass-2 GETs), then buckets (each adds W
    pass-1 GETs, and an index GET per writer once K > 1), neither pass past `small_gets` GETs.
    A cut that already has the tasks, or whose GETs are past the bound, is unchanged."""
    if buckets * groups >= min_tasks:
        return buckets, groups
    most_groups = max(groups, min(writers, small_gets // max(1, reads * parts)))
    groups = min(most_groups, max(groups, -(-min_tasks // buckets)))
    if buckets * groups < min_tasks:
        most_buckets = max(buckets, min(parts, small_gets // (2 * writers)))
        buckets = min(most_buckets, max(buckets, -(-min_tasks // groups)))
    return buckets, groups


def direct(
    parts: int,
    writers: int,
    total_bytes: int,
    request_bytes: int,
    reads: int = 1,
    small_gets: int = SMALL_GETS,
) -> bool:
    """Whether a dedup exchange runs in one pass: each part's reader GETs its section of every
    writer's object itself (exchange/sections.writer_ranges), no pass-1 object is written. Pack's
    one_pass rule (tokens/pack.py): while a writer's piece of a part, total / (W·N), is at least
    request_bytes / 2, the W·N GETs (per read of a part) are <= 2·total / request_bytes, still
    linear in the bytes, and the rows cross storage once instead of three times (written,
    regrouped, read). Also whatever the pieces' size while the W·N GETs are at most
    `small_gets` (dedup.exchange_small_gets): a bound, not a growth."""
    gets = reads * writers * parts
    return writers > 0 and (gets <= small_gets or 2 * int(total_bytes) >= gets * request_bytes)


def capped_cut(
    buckets: int,
    groups: int,
    parts: int,
    writers: int,
    total_bytes: int,
    task_bytes: int | None,
    reads: int = 1,
) -> tuple[int, int]:
    """(K, G) raised until total / (G·K), what one pass-1 task moves, is <= task_bytes.

    Past the cap, buckets and groups grow together, balancing W·K against reads·G·N (the two
    GET terms of an exchange of W writers into N parts), so requests grow as
    sqrt(W·N·total / task_bytes) rather than W·N; below it (every benchmark size) the cut, and
    so the requests' linear growth, is unchanged. Shard bytes never depend on the cut."""
    writers = max(1, writers)
    need = -(-int(total_bytes) // task_bytes) if task_bytes else 1
    if buckets * groups < need:
        balanced = math.isqrt(max(1, need * reads * parts // writers))
        buckets = max(buckets, min(parts, balanced))
        groups = max(groups, min(writers, -(-need // buckets)))
        buckets = max(buckets, min(parts, -(-need // groups)))
    return buckets, groups


def one_pass_writers(
    writers: int,
    parts: int,
    total_bytes: int,
    request_bytes: int,
    task_bytes: int | None = None,
    small_gets: int = SMALL_GETS,
) -> int:
    """How many writers an exchange should have whose writers each take a run of some inputs
    (near_fetch: a run of unit buckets), so that it runs in one pass (`direct`): the most, up to
    `writers`, whose pieces total / (W·N) are at least request_bytes (twice direct's bound: an
    estimated total may be off by half and the exchange still reads the writers' objects), and
    no fewer than total / task_bytes, so that no writer spills more than a pass-1 task would.
    `writers` where the exchange is direct already or no count fits both: the two passes then
    cost what they would, and the rows cross storage twice fewer where a count fits."""
    writers, total_bytes = max(1, writers), int(total_bytes)
    if direct(parts, writers, total_bytes, request_bytes, 1, small_gets):
        return writers
    fits = total_bytes // (max(1, parts) * request_bytes)
    need = -(-total_bytes // task_bytes) if task_bytes else 1
    return int(fits) if max(1, need) <= fits < writers else writers
