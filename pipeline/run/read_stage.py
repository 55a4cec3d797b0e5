"""The first stages: the listing, read+hash, and the quarantine checks.

`list_inputs` gives the `Listing` (the run's config sized to it and the run's layout), whose
`Units` say which pieces each work unit reads; `read_units` reads, signs and hashes every unit
(`Reads`), and `check_quarantine` stops the run past `ingest.max_error_rate` of bad records.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline.config.model import Config
from pipeline.config.reuse_keys import takedown_keyed
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.exchange.row_codec import FORMAT as ROW_FORMAT
from pipeline.formats import takedowns
from pipeline.ingest.listing import table_digest
from pipeline.run import input_guard
from pipeline.run.results import ListResult, ReadResult, RunError
from pipeline.run.tokenize_stage import choose_engine, tokenizer_bytes, with_fallback
from pipeline.run.waves import Waves


@dataclass(frozen=True)
class Listing:
    """The listing, the config sized by it (Config.for_listing) and the run it names."""

    cfg: Config
    listed: ListResult
    layout: RunLayout
    input_digest: str  # of the listed inputs: verify recomputes it from the lineage
    roots: dict[str, Location]  # source name -> its root
    takedown: takedowns.TakedownList = field(default_factory=takedowns.TakedownList)

    @property
    def input_bytes(self) -> dict[str, int]:
        """Listed bytes per source."""
        by_origin = self.listed.inputs.group_by("origin").aggregate([("size", "sum")])
        names, sizes = by_origin["origin"].to_pylist(), by_origin["size_sum"].to_pylist()
        return dict(zip(names, sizes, strict=True))


@dataclass(frozen=True)
class Units:
    """The work units: sorted ids, each one's source and the listing's pieces it reads."""

    ids: list[str]
    origin_of: dict[str, str]
    by_unit: pa.Table  # the listing's pieces, grouped by unit in `ids` order
    first: list[int]  # the row of each unit's first piece in `by_unit`, and its row count last

    @classmethod
    def of(cls, units: pa.Table) -> Units:
        by_unit = units.take(pc.sort_indices(units["unit_id"]))  # stable: pieces keep order
        unit_ids = by_unit["unit_id"].combine_chunks()
        first = (
            np.flatnonzero(pc.not_equal(unit_ids[1:], unit_ids[:-1]).to_numpy(zero_copy_only=False))
            + 1
        )
        first = [0, *first.tolist()] if len(unit_ids) else []
        ids = unit_ids.take(pa.array(first, pa.int64())).to_pylist()
        origins = by_unit["origin"].take(pa.array(first, pa.int64())).to_pylist()
        return cls(ids, dict(zip(ids, origins, strict=True)), by_unit, [*first, len(unit_ids)])

    def document_order(self, rank_of: dict[str, int]) -> list[str]:
        """The unit ids in the order of the documents they hold: their source's rank
        (`rank_of`: source name -> rank), then their first piece's path and start. Units are
        runs of the path order (ingest/work_units.py), so unit, then position in it, orders
        documents the same way whatever the unit size: near dedup's node ids
        (run/neardup.node_ids) and the heads of its buckets follow it."""
        paths, starts = self.by_unit["path"], self.by_unit["start"]
        first = {u: self.first[i] for i, u in enumerate(self.ids)}
        return sorted(self.ids, key=lambda u: (
            rank_of[self.origin_of[u]], paths[first[u]].as_py(), starts[first[u]].as_py()))

    def pieces_of(self, unit: str) -> list[dict]:
        """The unit's pieces, as its read task takes them."""
        i = bisect.bisect_left(self.ids, unit)
        start, end = self.first[i], self.first[i + 1]
        return self.by_unit.slice(start, end - start).to_pylist()


@dataclass(frozen=True)
class Reads:
    """read+hash's results, one per unit in `Units.ids` order, and the quarantine counts."""

    results: list[ReadResult]
    quarantined: Counter = field(default_factory=Counter)  # records per reason
    engine: dict = field(default_factory=dict)  # the manifest's tokenizer engine entry

    @property
    def docs_in(self) -> int:
        return sum(r.docs_in for r in self.results)

    @property
    def docs(self) -> int:
        return sum(r.docs for r in self.results)

    @property
    def removed_takedown(self) -> int:
        return sum(r.removed_takedown for r in self.results)

    @property
    def removed_filtered(self) -> dict[str, int]:
        """Documents each curation rule removed, over every unit."""
        return _summed(r.removed_filtered for r in self.results)

    @property
    def curated(self) -> dict[str, dict[str, int]]:
        """What the transforms did: documents changed per step, spans replaced per kind."""
        return {
            "changed": _summed(r.curated for r in self.results),
            "spans": _summed(r.curated_spans for r in self.results),
        }

    @property
    def quarantined_bytes(self) -> int:
        return sum(r.quarantined_bytes for r in self.results)


def _summed(counts) -> dict[str, int]:
    total: Counter = Counter()
    for c in counts:
        total.update(c)
    return dict(sorted(total.items()))


def list_inputs(waves: Waves, cfg: Config) -> Listing:
    """The listing and its units; the partitions follow the listed bytes, and the run's id
    (its layout) follows the config and the listing."""
    roots = {s.name: Location.from_uri(s.uri, cfg.storage) for s in cfg.sources}
    task = waves.task("list_units")
    [listed] = waves.run("list", [task.remote(roots[cfg.sources[0].name], cfg)])
    return listing_of(cfg, listed, roots)


def listing_of(cfg: Config, listed: ListResult, roots: dict[str, Location]) -> Listing:
    """The run a listing names: the config sized to it, its digest, run id and layout."""
    formats = pc.unique(listed.inputs["format"]).to_pylist()
    cfg = cfg.for_listing(listed.listed_bytes, formats)
    digest = table_digest(listed.inputs)
    # the run's own intermediates (dedup's exchanges) follow the row format: never read as another
    run_id = xxhash.xxh3_64_hexdigest(f"{cfg.output_hash()}:{digest}:{ROW_FORMAT}".encode())
    dataset = Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name
    listed_down = takedown_list(dataset)
    run_id = takedown_keyed(run_id, listed_down.digest)
    read_key = takedown_keyed(cfg.read_key(), listed_down.digest)
    layout = RunLayout.for_config(cfg, run_id, read_key)
    return Listing(cfg, listed, layout, digest, roots, listed_down)


def takedown_list(dataset: Location) -> takedowns.TakedownList:
    """The dataset's takedown list, checked against its newest version (no entry lost or
    edited: takedowns.check_intact); RunError, nothing committed, else."""
    try:  # a later run honours every takedown recorded so far: another run id, read key
        listed = takedowns.load(dataset)
        takedowns.check_intact(dataset, listed)
    except takedowns.TakedownListChanged as e:  # its line says what to restore
        raise RunError(str(e)) from None
    except takedowns.TakedownListError as e:
        raise RunError(f"{e}; nothing was committed") from None
    return listed


def check_takedowns_unchanged(listing: Listing) -> None:
    """Once the lease is held: RunError unless the takedown list is still the one the listing
    keyed the run by (a `remove` records an entry only under the lease, so none comes after)."""
    now = takedown_list(listing.layout.dataset)
    if sorted(now.entries) != sorted(listing.takedown.entries):
        new = sorted(set(now.entries) - set(listing.takedown.entries)) or ["(none)"]
        raise RunError(
            f"the takedown list changed after the run listed its input (entry {new[0]} appended"
            " by a `remove` or `takedown-lift`): the run was keyed by the list before it; run"
            " again; nothing was committed"
        )


def write_listing(listing: Listing) -> None:
    """The run's record of what it read: inputs, units and skipped, before any read task."""
    layout, listed = listing.layout, listing.listed
    layout.inputs.write_parquet(listed.inputs)
    layout.units.write_parquet(listed.units)
    layout.skipped.write_parquet(listed.skipped)


def read_units(waves: Waves, listing: Listing, units: Units) -> Reads:
    """read+hash: the listing's records written, then each unit read, tokenized, signed and
    hashed by one task, which leaves out the documents on the takedown list (the engine chosen
    first, and the wave rerun with tokenizers if a task found it disagreeing:
    run/tokenize_stage.py)."""
    cfg, layout = listing.cfg, listing.layout
    write_listing(listing)
    tokenizer_json = tokenizer_bytes(waves, cfg)
    engine, reason = choose_engine(waves, cfg, "read+hash", tokenizer_json)
    task, roots = waves.task("read_unit_task"), listing.roots
    listed_down = listing.takedown.ids
    down = waves.put(listed_down) if listed_down else None  # sent once, not once per task

    def wave(engine: str, rewrite: bool) -> list[ReadResult]:
        return waves.run(
            "read+hash",
            [
                task.remote(layout, roots[units.origin_of[u]], u, units.pieces_of(u), cfg,
                            tokenizer_json, engine, rewrite, down)  # fmt: skip
                for u in units.ids
            ],
            merge=True,
            redo=rewrite,  # the rerun's documents replace the failed wave's in the report
        )

    results, engine_entry = with_fallback(wave, engine, reason)
    quarantined: Counter = Counter()
    for r in results:
        quarantined.update(r.quarantined)
    return Reads(results, quarantined, engine_entry)


def check_quarantine(
    waves: Waves,
    listing: Listing,
    units: Units,
    reads: Reads,
    quarantined: Counter,
    allow_empty: bool = False,
) -> None:
    """The quarantine listing (the documents the tokenizer quarantined are the read tasks'
    too), merged behind exact dedup's first wave (Waves.later); RunError past
    ingest.max_error_rate of the records, or of the listed bytes for files whose records could
    not be counted (forbidden, undecodable), or, unless `allow_empty`, when no document is left
    (input_guard.check_documents), once the listing is written. The rates come from the read
    tasks' counts, not from the listing."""
    cfg, layout = listing.cfg, listing.layout
    merge = waves.task("merge_quarantine")
    origins = units.origin_of if cfg.named_sources else None  # rows name their source
    merging = waves.later("quarantine", lambda: [merge.remote(layout, units.ids, origins)])
    try:
        _check_rates(listing, reads, quarantined)
        if not allow_empty:
            input_guard.check_documents(listing.cfg, reads.docs, reads.docs_in)
    except RunError:
        waves.finish(merging)  # the listing the error names is written
        raise


def _check_rates(listing: Listing, reads: Reads, quarantined: Counter) -> None:
    cfg, layout = listing.cfg, listing.layout
    rate = cfg.ingest.max_error_rate
    docs_in, n_bad = reads.docs_in, sum(quarantined.values())
    if docs_in and n_bad / docs_in > rate:
        raise RunError(
            f"{n_bad} of {docs_in} records ({n_bad / docs_in:.2%}) were quarantined, more than"
            f" ingest.max_error_rate = {rate:.2%}; reasons: {dict(quarantined)};"
            f" listing: {layout.quarantine.uri}. Nothing was committed."
        )
    bad, listed = reads.quarantined_bytes, listing.listed.listed_bytes
    if listed and bad / listed > rate:
        raise RunError(
            f"{bad} of {listed} listed bytes ({bad / listed:.2%}) are in"
            " files that could not be read and whose records could not be counted, more than"
            f" ingest.max_error_rate = {rate:.2%}; listing:"
            f" {layout.quarantine.uri}. Nothing was committed."
        )
