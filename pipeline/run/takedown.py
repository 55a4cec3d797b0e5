"""Takedown: `python -m pipeline remove VERSION --ids FILE` records the ids on the dataset's
takedown list (formats/takedowns.py), which every later run applies, and writes a new version of
the dataset without the documents of every active entry (its own and those before it), by
re-packing the run's token files (no read, tokenize or dedup).

All of it holds the dataset's lease (core/lease.py), waited for: a dataset folder's newest
version is resolved, the list checked (takedowns.check_intact) and the entry recorded only then,
so two removals at once run one after the other and the second re-packs the first's version
leaving out both lists; none is lost.

The parent's packs are planned again with the same shard count per (source, split) and the ids
left out (tokens/pack.PackPlan.without): every remaining document keeps its shuffle key, so its
shard and its order among the others are the parent's, with the removed documents cut out. (A
fresh run on the input minus those documents can differ: fewer tokens may mean fewer shards,
and a removed document that won a dedup pair would let its duplicate back in.)

A takedown is a run of its own: its id hashes the parent version and the ids' digest, its
folder `_work/runs/<id>/` holds `removed_ids.parquet` (every id removed since the run: a
takedown of a takedown re-packs the same token files), its exchange objects, shard records and
stats.json, and `committed.json` once its version is committed; rerunning the same removal finds
it and commits nothing new. The commit is the run's: the dataset's lease held, every shard
checked as written, `verify`'s checks, then the manifest last (formats/manifest.py: `removal`,
counts.removed_takedown).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline.cli.exit_codes import CONFIG_ERROR
from pipeline.config.sections import PackConfig, RayConfig, RunConfig
from pipeline.core.layout import MANIFEST, RunLayout, new_version_id
from pipeline.core.lease import REMOVE_WAIT_S, LeaseHeld, LeaseLost, held
from pipeline.core.storage import Location
from pipeline.formats import documents, takedowns
from pipeline.formats.claims import documents_accounted
from pipeline.formats.data_path import blend_line
from pipeline.formats.manifest import (
    FORMAT,
    TAKEDOWN_KEY,
    ManifestError,
    commit_manifest,
    load_manifest,
)
from pipeline.formats.run_stats import RunStats
from pipeline.formats.verify import VerifyError, verify_manifest
from pipeline.formats.versions import resolve_version
from pipeline.run.accounting import Parts, shard_entries
from pipeline.run.commit_stage import already_committed, document_index
from pipeline.run.input_guard import check_publish
from pipeline.run.pack_stage import run_packs
from pipeline.run.ray_env import ensure_ray
from pipeline.run.results import RunError, RunResult
from pipeline.run.tokenize_tasks import removals_digest
from pipeline.run.waves import Waves
from pipeline.tokens.pack import PackPlan, ids_digest, pack_plan

EXAMPLES = 3  # unknown ids printed


class TakedownError(RunError):
    """The version cannot be taken down (no index, token files gone); nothing was committed."""


class UnknownIds(TakedownError):
    """--strict and ids the version does not hold."""

    exit_code = CONFIG_ERROR


class NoIndex(TakedownError):
    """A version from before documents.parquet: which document is where is not recorded."""

    exit_code = CONFIG_ERROR


@dataclass
class Takedown:
    result: RunResult | None  # None when no id of the list is in the version
    removed: int  # documents removed now
    ids: int  # distinct ids in the list
    unknown: list[str] = field(default_factory=list)  # ids the version does not hold
    entry: dict | None = None  # the takedown list's entry of these ids (formats/takedowns.py)
    new_entry: bool = False  # recorded now (else an active entry had exactly these ids)
    parent: Location | None = None  # the version re-packed (the newest, for a dataset folder)


def remove_documents(
    target: Location,
    ids: list[str],
    strict: bool = False,
    ray_cfg: RayConfig | None = None,
    reason: str | None = None,
    allow_empty: bool = False,
    wait_s: float = REMOVE_WAIT_S,
    on_wait=None,
) -> Takedown:
    """Record `ids` on the dataset's takedown list (formats/takedowns.py: every later run leaves
    them out), then re-pack the version without every active entry's ids. `target` is a version
    folder, or a dataset folder: its newest version, resolved once the dataset's lease is held
    (waited for up to wait_s; on_wait(LeaseHeld) when the wait begins), so that a removal
    committed meanwhile is the parent, never re-packed over. --strict refuses first: nothing
    recorded. allow_empty: publish even a version that empties a source or the dataset's newest
    version shrinks against (run/input_guard.py's rule, with run.max_input_shrink's default)."""
    given_version = (target / MANIFEST).exists()
    dataset = target
    if given_version:
        dataset = Location(target.fs, target.path.rstrip("/").rsplit("/", 1)[0])
    # a version that cannot be removed from is one line before any lease is taken or waited for
    check_removable(resolve_version(target))
    label = f"remove-{uuid.uuid4().hex[:8]}"  # the run id is known once the parent is
    lease_at = RunLayout(dataset, label, "", "").lease
    try:
        with held(lease_at, label, wait_s=wait_s, on_wait=on_wait) as lease:
            version = target if given_version else resolve_version(dataset)
            return _remove(lease, version, dataset, ids, strict, ray_cfg, reason, allow_empty)
    except LeaseLost:
        raise
    except LeaseHeld as e:
        waited = f"; waited {wait_s:g} s for it" if wait_s > 0 else ""
        raise LeaseHeld(
            f"{e}{waited}: nothing was recorded or committed; run `remove` again"
        ) from None


def _remove(lease, version, dataset, ids, strict, ray_cfg, reason, allow_empty) -> Takedown:
    """remove_documents' work, the dataset's lease held."""
    check_removable(version)
    manifest = load_manifest(version)
    if manifest.get("documents") is None:
        raise NoIndex(
            f"{version.uri} has no document index (written before it): rerun the run to"
            " write a version that can be taken down; nothing was committed"
        )
    try:
        index = documents.read_index(version, manifest["documents"])
    except ValueError as e:  # not the index the manifest names
        raise TakedownError(f"{version.uri}: {e}: run `verify`; nothing was committed") from None
    mine = pc.is_in(index["doc_id"], value_set=pa.array(ids, pa.string()))
    present = sorted(set(index.filter(mine)["doc_id"].to_pylist()))
    unknown = sorted(set(ids) - set(present))
    if unknown and strict:
        raise UnknownIds(
            f"{len(unknown)} of {len(ids)} ids are not in version {manifest['version']}"
            f" (e.g. {', '.join(map(repr, unknown[:EXAMPLES]))}); --strict: nothing was"
            " committed"
        )
    try:  # first: the decision stands for later runs even if the re-pack below fails
        takedowns.check_intact(dataset, takedowns.load(dataset))
        entry, new_entry = takedowns.record(dataset, ids, reason)
        listed = takedowns.load(dataset)  # every active entry: its own and those before it
    except takedowns.TakedownListChanged as e:  # a hand edit: its line says what to restore
        raise TakedownError(str(e)) from None
    except takedowns.TakedownListError as e:
        raise TakedownError(f"{e}; nothing was committed") from None
    hit = pc.is_in(index["doc_id"], value_set=pa.array(listed.ids, pa.string()))
    gone = index.filter(hit)
    if gone.num_rows == 0:
        return Takedown(None, 0, len(ids), unknown, entry, new_entry, version)
    parent = manifest["version"]
    digest = ids_digest(sorted(set(gone["doc_id"].to_pylist())))
    run_id = xxhash.xxh3_64_hexdigest(f"{parent}:{digest}".encode())
    lineage = manifest["lineage"]
    layout = RunLayout(dataset, run_id, "", _token_key(dataset, lineage))
    already = already_committed(layout)
    if already is not None:
        return Takedown(already, gone.num_rows, len(ids), unknown, entry, new_entry, version)
    units = _token_files(layout, dataset, lineage, manifest["version"])
    ensure_ray(SimpleNamespace(ray=ray_cfg or RayConfig()))
    started = dt.datetime.now(dt.timezone.utc)
    excluded = set(gone["doc_id"].to_pylist())
    if isinstance(lineage.get("removed_ids"), str):  # the parent was a takedown
        earlier = (dataset / lineage["removed_ids"]).read_parquet(columns=["doc_id"])
        excluded |= set(earlier["doc_id"].to_pylist())
    layout.removed_ids.write_parquet(pa.table({"doc_id": sorted(excluded)}))
    version_id = new_version_id(run_id)
    new = layout.version(version_id)
    parts, stats = _repack(layout, new, manifest, units, frozenset(excluded), lease)
    out = _manifest(manifest, layout, version_id, parts, gone, digest, len(unknown), started)
    out["takedowns"] = {  # the list this version honours, as a run's (commit_stage.py)
        "entries": [e["entry"] for e in listed.active],
        "ids_sha256": listed.digest,
    }
    if not allow_empty:
        check_publish(dataset, out, RunConfig().max_input_shrink, "remove")
    out["documents"] = _document_index(layout, new, shard_entries(parts), index)
    layout.stats.write_bytes(RunStats(run_id=run_id, stages=[stats]).to_json())
    try:
        verify_manifest(new, out, shards_checked=True)
    except VerifyError as e:
        raise TakedownError(f"the version fails verify: {e}; nothing was committed") from None
    lease.renew()  # fenced: LeaseLost if another run took the dataset over meanwhile
    commit_manifest(new, out)
    layout.committed.write_bytes(json.dumps({"version": version_id}).encode())
    done = RunResult(new, out)
    return Takedown(done, gone.num_rows, len(ids), unknown, entry, new_entry, version)


def check_removable(version: Location) -> None:
    """ManifestError unless the manifest's lineage names the run records a takedown re-packs
    from (units, removed) as paths inside the dataset folder."""
    lineage = load_manifest(version).get("lineage")
    for key in ("units", "removed"):
        path = lineage.get(key) if isinstance(lineage, dict) else None
        if (
            not isinstance(path, str)
            or not path.strip("/")
            or path.startswith("/")
            or ".." in path.split("/")
            or "\0" in path
        ):
            raise ManifestError(
                f"{version.uri}: lineage.{key} is not a path in the dataset folder: the"
                " version cannot be re-packed (run `verify`); nothing was committed"
            )


def _token_key(dataset: Location, lineage: dict) -> str:
    """The run's token folder: named by the lineage (since takedowns), else the only one."""
    if isinstance(lineage.get("tokens"), str):
        return lineage["tokens"].rstrip("/").rsplit("/", 1)[-1]
    try:
        keys = (dataset / "_work/tokens").ls_names()
    except FileNotFoundError:
        keys = []
    if not keys:
        raise TakedownError(
            f"the token files of the version's run are gone ({dataset.uri}/_work/tokens is"
            " empty; retention deletes them after"
            " retention.rules.token_parts.delete_after_days): a takedown cannot re-pack it;"
            " remove the documents from the input and `run` again; nothing was committed"
        )
    if len(keys) != 1:
        raise TakedownError(
            f"the version's lineage does not name its token folder and {dataset.uri}/_work/tokens"
            f" holds {len(keys)}: rerun the run (its version names it); nothing was committed"
        )
    return keys[0]


def _token_files(
    layout: RunLayout, dataset: Location, lineage: dict, parent: str
) -> dict[str, list[tuple[str, str]]]:
    """source -> its units' (unit, removals digest): the names of the token files to re-pack;
    TakedownError when any of them is gone."""
    units = (dataset / lineage["units"]).read_parquet(columns=["unit_id", "origin"])
    origin = dict(zip(units["unit_id"].to_pylist(), units["origin"].to_pylist(), strict=True))
    removed = (dataset / lineage["removed"]).read_parquet(columns=["unit_id", "source", "row"])
    removed = removed.sort_by(
        [("unit_id", "ascending"), ("source", "ascending"), ("row", "ascending")]
    )
    rows = Counter(removed["unit_id"].to_pylist())
    first, at = {}, 0
    for unit in sorted(rows):  # a unit's rows are consecutive, units in this order
        first[unit], at = at, at + rows[unit]
    out: dict[str, list[tuple[str, str]]] = {}
    for unit in sorted(origin):  # the digest select named the unit's kept index with
        mine = removed.slice(first.get(unit, 0), rows.get(unit, 0))
        out.setdefault(origin[unit], []).append((unit, removals_digest(mine)))
    try:
        there = set(layout.tokens.ls_names())
    except FileNotFoundError:
        there = set()
    missing = [  # the unit's token file, and the index of what the run's dedup kept of it
        name
        for pairs in out.values()
        for u, d in pairs
        for name in (f"{u}.bin", f"{u}-{d}.parquet")
        if name not in there
    ]
    if missing:
        raise TakedownError(
            f"{len(missing)} token files of version {parent}'s run are gone (e.g."
            f" {layout.tokens.relative_to(dataset)}/{missing[0]}; retention deletes them after"
            " retention.rules.token_parts.delete_after_days): a takedown cannot re-pack it;"
            " remove the documents from the input and `run` again (keep token_parts as long"
            " as takedowns must stay cheap); nothing was committed"
        )
    return out


def _plans(manifest: dict, units: dict[str, list]) -> list[tuple[str, str, PackPlan, list]]:
    """The parent's packs, in manifest order, each with the parent's shard count (so that
    every remaining document stays in its shard) and its own exchange cut."""
    fraction = float(((manifest.get("config") or {}).get("split") or {}).get("valid_fraction", 0))
    shard_bytes = int(manifest["config"]["pack"]["shard_bytes"])
    defaults = PackConfig()
    packs: dict[tuple[str, str, str], list[dict]] = {}
    for shard in manifest["shards"] + (manifest.get("splits") or {}).get("valid", []):
        prefix = shard["bin"].removesuffix(".bin").rsplit("-", 1)[0]
        packs.setdefault((shard["source"], shard["split"], prefix), []).append(shard)
    out = []
    for (source, split, prefix), shards in packs.items():
        mine = units.get(source, [])
        cut = pack_plan(
            sum(s["bin_bytes"] for s in shards),
            len(mine),
            shard_bytes,
            int(defaults.exchange_request_bytes),
            int(defaults.exchange_task_bytes),
        )
        plan = PackPlan(
            len(shards),
            min(cut.buckets, len(shards)),
            max(1, min(cut.groups, len(mine))),
            prefix,
            split if fraction > 0 else "",
            fraction if fraction > 0 else 0.0,
        )
        out.append((source, split, plan, plan.unit_groups(mine)))
    return out


def _repack(layout, version, manifest, units, excluded, lease) -> tuple[Parts, dict]:
    """Both pack passes of every pack (run/pack_stage.run_packs) without the `excluded`
    documents; (source, split, results) per pack, and the stage's stats.json entry. The lease
    is renewed while they run, as a run's."""
    packs = [
        (source, split, plan.without(excluded), groups)
        for source, split, plan, groups in _plans(manifest, units)
    ]
    waves = Waves()
    waves.lease = lease
    parts = run_packs(waves, layout, version, packs, manifest["tokenizer"], TakedownError)
    return parts, waves.stats[0]


def _manifest(parent, layout, version_id, parts, gone, digest, unknown, started) -> dict:
    """The parent's manifest with the new shards, counts and sources, and the removal."""
    splits = shard_entries(parts)
    shards = splits["train"] + splits["valid"]
    counts = dict(parent["counts"])
    counts["docs_out"] = sum(s["documents"] for s in shards)
    counts["tokens"] = sum(s["tokens"] for s in shards)
    counts[TAKEDOWN_KEY] = counts.get(TAKEDOWN_KEY, 0) + gone.num_rows
    by_source = Counter(gone["source"].to_pylist())
    sources = {}
    for name, entry in (parent.get("sources") or {}).items():
        mine = [s for s in shards if s["source"] == name]
        entry = {**entry, TAKEDOWN_KEY: entry.get(TAKEDOWN_KEY, 0) + by_source[name]}
        entry["docs_out"] = sum(s["documents"] for s in mine)
        entry["tokens"] = sum(s["tokens"] for s in mine)
        for split in ("train", "valid"):
            entry[f"{split}_documents"] = sum(s["documents"] for s in mine if s["split"] == split)
            entry[f"{split}_tokens"] = sum(s["tokens"] for s in mine if s["split"] == split)
        sources[name] = entry
    weights = {name: e.get("weight", 1.0) for name, e in sources.items()}
    dataset = layout.dataset
    out = {
        **parent,
        "format": FORMAT,  # the re-packed shards carry block checksums (ShardWriter)
        "version": version_id,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "counts": counts,
        "shards": splits["train"],
        "splits": {"train": [s["bin"] for s in splits["train"]], "valid": splits["valid"]},
        "removal": {
            "parent": parent["version"],
            "documents": gone.num_rows,
            "ids_sha256": digest,
            "unknown_ids": unknown,
        },
        "lineage": {
            **parent["lineage"],
            "removed_ids": layout.removed_ids.relative_to(dataset),
            "stats": layout.stats.relative_to(dataset),
        },
        "run": {**parent["run"], "run_id": layout.run_id, "started_at": started.isoformat()},
    }
    if sources:
        out["sources"] = sources
    if "blend" in parent:
        out["blend"] = {
            "train": blend_line(splits["train"], weights),
            "valid": blend_line(splits["valid"], {name: 1.0 for name in weights}),
        }
    expected = parent["counts"]["docs_out"] - gone.num_rows
    if documents_accounted(counts) != counts["docs_in"] or counts["docs_out"] != expected:
        raise TakedownError(
            f"accounting does not balance: the shards hold {counts['docs_out']} documents, the"
            f" parent's {parent['counts']['docs_out']} less {gone.num_rows} taken down is"
            f" {expected}; nothing was committed"
        )
    return out


def _document_index(layout, version, splits, parent_index: pa.Table) -> dict:
    """The new version's documents.parquet; columns beyond the index's own (kept input fields,
    formats/documents.py) come from the parent's index."""
    extra = [c for c in parent_index.column_names if c not in documents.INDEX_SCHEMA.names]
    fields = documents.fields_of(parent_index, extra) if extra else None
    return document_index(layout, version, splits, fields)
