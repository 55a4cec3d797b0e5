"""The takedown list of a dataset, and the id files `remove` reads.

`OUTPUT/<name>/_takedowns/<entry>.json` (core/layout.TAKEDOWN_ENTRY): one UTF-8 JSON object per
entry, created exclusively (storage create_exclusive) and never rewritten, named
`<UTC stamp>-<kind>-<8 hex>` so that names sort by time. Fields:

    format      "pipeline.takedown/1"
    entry       the object's name (without .json): what `takedown-lift --entry` names
    kind        "takedown" (`remove`) or "lift" (`takedown-lift`)
    at          ISO-8601 UTC time it was recorded
    reason      the user's text (`--reason`; `remove` without one: "(none given)")
    ids         takedown: the document ids, sorted, distinct
    ids_sha256  takedown: ids_digest(ids), SHA-256 of the sorted ids as a JSON list
    lifts       lift: the takedown entry it lifts

The active list is every takedown entry no lift names; every run applies it in the read pass
and its digest goes into the run id and the read key. No hand edit brings ids back
(`check_intact`, run by every run and `remove`): each entry's ids hash to its `ids_sha256`, and
each entry the newest manifest honours (`takedowns.entries`, `takedowns.ids_sha256`) is still
there, unchanged. Lifting (an appended entry) is the one way back.

An id file (`remove --ids FILE`), by its name's ending: `.jsonl` an "id" string a line;
`.parquet` an `id` string column; else one UTF-8 id a line exactly as written (only the ending
"\\n" removed; an empty line names nothing).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from pipeline.cli.exit_codes import RUN_STOPPED
from pipeline.core.layout import MANIFEST, takedown_entry, takedowns, utc_stamp
from pipeline.core.storage import Location
from pipeline.formats.versions import committed_versions

FORMAT = "pipeline.takedown/1"
NO_REASON = "(none given)"


def ids_digest(ids) -> str:
    """SHA-256 hex of the distinct ids, sorted, as a compact UTF-8 JSON list."""
    text = json.dumps(sorted(set(ids)), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class TakedownListError(Exception):
    """An entry of the list, or an id file, cannot be read or used."""


class TakedownListChanged(TakedownListError):
    """The list lost an entry the newest version honours, or an entry's ids were edited: a run
    or `remove` stops, nothing committed."""

    exit_code = RUN_STOPPED


def read_id_file(path: str) -> list[str]:
    """The distinct ids of an id file (see the module docstring), sorted."""
    if path.endswith(".parquet"):
        table = pq.read_table(path)
        if "id" not in table.column_names:
            raise TakedownListError(f"{path} has no `id` column (columns: {table.column_names})")
        ids = table["id"].to_pylist()
        where = [f"row {n}" for n in range(len(ids))]
    elif path.endswith(".jsonl"):
        ids, where = [], []
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise TakedownListError(f"{path}:{n}: not JSON ({e})") from None
                ids.append(record.get("id") if isinstance(record, dict) else None)
                where.append(f"line {n}")
    else:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the file's last line ended with "\n"
        ids = [line for line in lines if line != ""]
        where = ["" for _ in ids]
    for doc_id, at in zip(ids, where, strict=True):
        if not isinstance(doc_id, str) or doc_id == "":
            raise TakedownListError(f"{path} {at}: `id` is {doc_id!r}, not a non-empty string")
    return sorted(set(ids))


@dataclass(frozen=True)
class TakedownList:
    """Every entry of a dataset's list, by name, and what is active."""

    entries: dict[str, dict] = field(default_factory=dict)

    @property
    def lifted(self) -> dict[str, dict]:
        """takedown entry -> the lift entry that lifted it."""
        return {e["lifts"]: e for e in self.entries.values() if e["kind"] == "lift"}

    @property
    def active(self) -> list[dict]:
        lifted = self.lifted
        entries = sorted(self.entries.items())
        return [e for n, e in entries if e["kind"] == "takedown" and n not in lifted]

    @property
    def ids(self) -> list[str]:
        """The active ids, sorted, distinct."""
        return sorted({i for e in self.active for i in e["ids"]})

    @property
    def digest(self) -> str:
        """ids_digest of the active ids; "" for none (a run then keys as if no list existed)."""
        ids = self.ids
        return ids_digest(ids) if ids else ""

    def naming(self, doc_id: str) -> list[dict]:
        """The entries, takedowns and their lifts, that name `doc_id`, oldest first."""
        lifted, out = self.lifted, []
        for name, entry in sorted(self.entries.items()):
            if entry["kind"] == "takedown" and doc_id in entry["ids"]:
                out.append(entry)
                if name in lifted:
                    out.append(lifted[name])
        return out


def load(dataset: Location) -> TakedownList:
    """The dataset's list (empty when it has none); TakedownListError on an unreadable entry."""
    entries = {}
    for name in takedowns(dataset).ls_names():
        if not name.endswith(".json"):
            continue
        loc = takedown_entry(dataset, name.removesuffix(".json"))
        try:
            entry = json.loads(loc.read_bytes())
            _check(entry, name.removesuffix(".json"))
        except (ValueError, KeyError, TypeError) as e:
            raise TakedownListError(f"takedown list entry {loc.uri} is unreadable: {e}") from None
        entries[entry["entry"]] = entry
    return TakedownList(entries)


def _check(entry: dict, name: str) -> None:
    if entry["format"] != FORMAT or entry["entry"] != name or not isinstance(entry["reason"], str):
        raise ValueError(f"not a {FORMAT} entry named {name}")
    if entry["kind"] == "takedown":
        if not all(isinstance(i, str) for i in entry["ids"]):
            raise ValueError("`ids` holds a non-string")
    elif entry["kind"] != "lift" or not isinstance(entry["lifts"], str):
        raise ValueError(f"kind {entry['kind']!r} / lifts {entry.get('lifts')!r}")


def check_intact(dataset: Location, listed: TakedownList) -> None:
    """TakedownListChanged (one line naming the entry) unless every takedown entry's ids hash to
    its ids_sha256 and the list still holds, unchanged, each entry the dataset's newest version
    honours (its manifest's `takedowns`; a lifted entry is still on the list, with its lift)."""
    for name, entry in sorted(listed.entries.items()):
        if entry["kind"] == "takedown" and entry.get("ids_sha256") != ids_digest(entry["ids"]):
            raise TakedownListChanged(
                f"takedown list entry {takedown_entry(dataset, name).uri} was edited: its"
                f" {len(set(entry['ids']))} ids do not hash to its ids_sha256"
                f" {str(entry.get('ids_sha256'))[:16]}...: restore it (entries are never"
                " rewritten; `takedown-lift` brings ids back); nothing was committed"
            )
    version, honoured = newest_honoured(dataset)
    if not honoured:
        return
    for name in honoured["entries"]:
        if name not in listed.entries:
            raise TakedownListChanged(
                f"takedown list entry {name}, which version {version} honours, is gone from"
                f" {takedowns(dataset).uri}: restore it (entries are never deleted;"
                " `takedown-lift` brings ids back); nothing was committed"
            )
        if listed.entries[name]["kind"] != "takedown":
            raise TakedownListChanged(
                f"takedown list entry {name}, which version {version} honours, is no longer a"
                " takedown: restore it; nothing was committed"
            )
    ids = {i for name in honoured["entries"] for i in listed.entries[name]["ids"]}
    if ids_digest(ids) != honoured["ids_sha256"]:
        names = ", ".join(honoured["entries"])
        raise TakedownListChanged(
            f"takedown list entries {names}, which version {version} honours, no longer hold"
            f" its ids (their digest is not its takedowns.ids_sha256"
            f" {honoured['ids_sha256'][:16]}...): an entry was edited; restore it; nothing was"
            " committed"
        )


def newest_honoured(dataset: Location) -> tuple[str | None, dict | None]:
    """(version, its manifest's `takedowns` {entries, ids_sha256}) of the dataset's newest
    committed version; (version or None, None) when there is none or it honours no list."""
    versions = committed_versions(dataset)
    if not versions:
        return None, None
    try:
        manifest = json.loads((dataset / versions[-1] / MANIFEST).read_bytes())
    except (FileNotFoundError, ValueError):  # retention meanwhile, or `verify`'s to report
        return versions[-1], None
    down = manifest.get("takedowns") if isinstance(manifest, dict) else None
    if not isinstance(down, dict) or not down.get("entries"):
        return versions[-1], None
    entries, digest = down.get("entries"), down.get("ids_sha256")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise TakedownListChanged(
            f"version {versions[-1]}'s takedowns.entries is not a list of entry names: the list"
            " it honours cannot be checked (run `verify`); nothing was committed"
        )
    if not isinstance(digest, str):
        raise TakedownListChanged(
            f"version {versions[-1]}'s takedowns.ids_sha256 is not a digest: the list it"
            " honours cannot be checked (run `verify`); nothing was committed"
        )
    return versions[-1], {"entries": entries, "ids_sha256": digest}


def record(dataset: Location, ids: list[str], reason: str | None) -> tuple[dict, bool]:
    """A takedown entry for `ids` (distinct, sorted); (the entry, whether it is new): an active
    entry with exactly these ids is returned as it is."""
    digest = ids_digest(ids)
    for entry in load(dataset).active:
        if entry["ids_sha256"] == digest:
            return entry, False
    body = {"ids": sorted(set(ids)), "ids_sha256": digest}
    reason = reason if reason and reason.strip() else NO_REASON  # never refused for want of it
    return _create(dataset, "takedown", digest, reason, body), True


def lift(dataset: Location, name: str, reason: str) -> dict:
    """A lift entry for takedown entry `name`; TakedownListError when it is not an active
    takedown entry of the list."""
    if not reason.strip():
        raise TakedownListError(
            f"--reason {reason!r} is blank: a lift must say why the ids come back; nothing was"
            " recorded"
        )
    current = load(dataset)
    entry = current.entries.get(name)
    if entry is None or entry["kind"] != "takedown":
        known = ", ".join(e["entry"] for e in current.active) or "none"
        raise TakedownListError(
            f"{name!r} is not a takedown entry of {dataset.uri} (active entries: {known})"
        )
    if name in current.lifted:
        raise TakedownListError(
            f"entry {name} was lifted already, by {current.lifted[name]['entry']}"
        )
    return _create(dataset, "lift", ids_digest([name]), reason, {"lifts": name})


def _create(dataset: Location, kind: str, digest: str, reason: str, body: dict) -> dict:
    now = dt.datetime.now(dt.timezone.utc)
    name = f"{utc_stamp(now)}-{kind}-{digest[:8]}"
    entry = {"format": FORMAT, "entry": name, "kind": kind, "at": now.isoformat(),
             "reason": reason, **body}  # fmt: skip
    created, _ = takedown_entry(dataset, name).create_exclusive(
        json.dumps(entry, indent=1, ensure_ascii=False).encode()
    )
    if not created:  # the same kind and digest in the same microsecond: never overwritten
        raise TakedownListError(f"takedown list entry {name} exists already; try again")
    return entry


def describe(entry: dict) -> str:
    """One line naming an entry: its name, kind, time and reason."""
    return f"{entry['kind']} {entry['entry']} at {entry['at']}: reason {entry['reason']!r}"
