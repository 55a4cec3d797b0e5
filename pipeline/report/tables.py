"""The cost report's tables (report/build.py), once for both renderers: headers and rows as strings.

report/markdown.py and report/html.py only lay these out, so a column is added here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.core.units import human_bytes


def usd(x: float) -> str:
    """Dollars: cents from a cent up, else up to 6 decimals (small test datasets cost little)."""
    sign = "-" if x < 0 else ""
    x = abs(x)
    if x == 0 or x >= 0.01:
        return f"{sign}${x:,.2f}"
    if x < 5e-7:
        return f"{sign}<$0.000001"
    return f"{sign}${x:.6f}".rstrip("0")


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    label_columns: int = 1  # the leading columns that name a row; the rest are figures
    strong_rows: frozenset[int] = frozenset()  # rows set in bold (totals)

    def without(self, *headers: str) -> Table:
        """The same table less the named columns."""
        keep = [i for i, h in enumerate(self.headers) if h not in headers]
        return Table(
            [self.headers[i] for i in keep],
            [[row[i] for i in keep] for row in self.rows],
            sum(1 for i in keep if i < self.label_columns),
            self.strong_rows,
        )


def _retained_pairs(before: list[dict], after: list[dict]) -> list[tuple[str, str, dict, dict]]:
    """(data class, storage class, row now, row after) over both listings; absent rows are 0."""
    zero = {"objects": 0, "bytes": 0, "usd_month": 0.0}
    now = {(x["data_class"], x["storage_class"]): x for x in before}
    later = {(x["data_class"], x["storage_class"]): x for x in after}
    return [
        (c, s, now.get((c, s), zero), later.get((c, s), zero))
        for c, s in sorted(now.keys() | later.keys())
    ]


def monthly_cost(r: dict[str, Any]) -> Table:
    """What it costs per month, now and after the retention plan."""
    b, f = r["before"], r["after"]

    def ratio(m: dict) -> str:
        return f"{m['retained_per_read']:.2f}" if m["retained_per_read"] else "n/a"

    rows = [
        [name, usd(b[k]), usd(f[k])]
        for name, k in (
            ("storage", "storage_usd"),
            ("requests", "request_usd"),
            ("retrieval", "retrieval_usd"),
            ("total", "total_usd"),
        )
    ]
    rows += [
        ["bytes retained", human_bytes(b["retained_bytes"]), human_bytes(f["retained_bytes"])],
        [
            "bytes read / month",
            human_bytes(b["read_bytes_per_month"]),
            human_bytes(f["read_bytes_per_month"]),
        ],
        ["retained / read", ratio(b), ratio(f)],
    ]
    return Table(["", "now", "after retention plan"], rows, strong_rows=frozenset({3}))


def retained(r: dict[str, Any]) -> Table:
    """Objects, bytes and their cost by data class and storage class, now and after the plan."""
    return Table(
        [
            "data class",
            "storage class",
            "objects",
            "bytes",
            "$/month",
            "objects after",
            "bytes after",
            "$/month after",
        ],
        [
            [
                c,
                sc,
                f"{x['objects']:,}",
                human_bytes(x["bytes"]),
                usd(x["usd_month"]),
                f"{y['objects']:,}",
                human_bytes(y["bytes"]),
                usd(y["usd_month"]),
            ]
            for c, sc, x, y in _retained_pairs(r["before"]["retained"], r["after"]["retained"])
        ],
        label_columns=2,
    )


def reads(r: dict[str, Any]) -> Table:
    """Pipeline and training reads per month, priced at the storage classes after the plan."""
    return Table(
        ["reader", "reads class", "bytes", "requests", "request $", "retrieval $"],
        [
            [
                s["stream"],
                s["data_class"],
                human_bytes(s["bytes_per_month"]),
                ", ".join(f"{k.upper()} {n:,.0f}" for k, n in s["requests"].items()) or "-",
                usd(sum(s["request_usd"].values())),
                usd(s["retrieval_usd"]),
            ]
            for s in r["after"]["reads"]
        ],
        label_columns=2,
    )


def requests_by_type(r: dict[str, Any]) -> Table:
    consumers = sorted({c for v in r["requests"].values() for c in v})
    return Table(
        ["kind", *consumers],
        [
            [k.upper(), *(f"{v.get(c, 0):,.0f}" for c in consumers)]
            for k, v in r["requests"].items()
        ],
    )


def retained_vs_read(r: dict[str, Any]) -> Table:
    return Table(
        ["data class", "retained now", "retained after", "read / month"],
        [
            [
                x["data_class"],
                human_bytes(x["retained_before"]),
                human_bytes(x["retained_after"]),
                human_bytes(x["read_per_month"]),
            ]
            for x in r["by_class"]
        ],
    )


def napkin(n: dict[str, Any]) -> Table:
    """One epoch of training, one object per document vs shards (the report's "napkin")."""
    return Table(
        [
            "layout",
            "objects",
            "bytes/object",
            "GET/epoch",
            "request $/epoch",
            f"first-byte waits ({n['latency_s'] * 1000:g} ms each)",
            "PUT $ to write",
        ],
        [
            [
                name,
                f"{x['objects']:,}",
                human_bytes(x["bytes_per_object"]),
                f"{x['get_requests_per_epoch']:,.0f}",
                usd(x["request_usd_per_epoch"]),
                f"{x['first_byte_wait_s_per_epoch']:,.1f} s",
                usd(x["put_usd_to_write"]),
            ]
            for name, x in (("small files", n["small_files"]), ("shards", n["shards"]))
        ],
    )


def sources(r: dict[str, Any]) -> Table:
    """Bytes and tokens per source (report/build.py source_rows)."""
    return Table(
        [
            "source",
            "weight",
            "input",
            "docs in",
            "docs out",
            "train shards",
            "train tokens",
            "valid shards",
            "valid tokens",
            "tokens/epoch",
            "read/epoch",
        ],
        [
            [
                x["source"],
                f"{x['weight']:g}",
                human_bytes(x["input_bytes"]),
                f"{x['docs_in']:,}",
                f"{x['docs_out']:,}",
                human_bytes(x["train_bytes"]),
                f"{x['train_tokens']:,}",
                human_bytes(x["valid_bytes"]),
                f"{x['valid_tokens']:,}",
                f"{x['epoch_tokens']:,.0f}",
                human_bytes(x["epoch_bytes"]),
            ]
            for x in r.get("sources") or []
        ],
    )


def _rate(n: int, of: int) -> str:
    return f"{n / of:.1%}" if of else "-"


def dedup_by_source(data: dict[str, Any]) -> Table:
    """Per source: documents in, removed as exact and near duplicates (with their rates),
    quarantined, out, and the removals kept in another source's favour."""
    return Table(
        [
            "source",
            "docs in",
            "exact",
            "exact %",
            "near",
            "near %",
            "quarantined",
            "docs out",
            "removed in favour of",
        ],
        [
            [
                x["source"],
                f"{x['docs_in']:,}",
                f"{x['removed_exact']:,}",
                _rate(x["removed_exact"], x["docs_in"]),
                f"{x['removed_near']:,}",
                _rate(x["removed_near"], x["docs_in"]),
                f"{x['quarantined']:,}",
                f"{x['docs_out']:,}",
                ", ".join(f"{k} {n:,}" for k, n in x["in_favour_of"].items()) or "-",
            ]
            for x in data["sources"]
        ],
    )


def quarantine_reasons(data: dict[str, Any]) -> Table:
    total = sum(data["quarantine"].values())
    return Table(
        ["reason", "documents", "share"],
        [[k, f"{n:,}", _rate(n, total)] for k, n in sorted(data["quarantine"].items())]
        + [["total", f"{total:,}", _rate(total, total)]],
        strong_rows=frozenset({len(data["quarantine"])}),
    )


def curation_rules(data: dict[str, Any]) -> Table:
    """Per curation rule: the documents it removed (share of all documents in),
    or for a transform the documents it rewrote and the spans it replaced, per kind."""
    changed, spans = data["curated"].get("changed", {}), data["curated"].get("spans", {})
    docs_in = data["docs_in"]
    rows = [[rule, f"{n:,}", _rate(n, docs_in), "-"] for rule, n in data["filtered"].items()]
    for rule, n in changed.items():
        prefix = rule + "."
        kinds = [f"{k[len(prefix) :]} {v:,}" for k, v in spans.items() if k.startswith(prefix)]
        rows.append([rule, f"{n:,} rewritten", _rate(n, docs_in), ", ".join(kinds) or "-"])
    return Table(["rule", "documents", "of docs in", "spans replaced"], rows)


def tokens_by_split(data: dict[str, Any]) -> Table:
    return Table(
        ["source", "split", "documents", "tokens", "shard bytes"],
        [
            [x["source"], split, f"{y['documents']:,}", f"{y['tokens']:,}", human_bytes(y["bytes"])]
            for x in data["sources"]
            for split, y in x["splits"].items()
        ],
        label_columns=2,
    )


def projection(bill: dict[str, Any]) -> Table:
    """The monthly bill at `report --corpus-bytes` (report/bill.py)."""
    rows = [
        [f"storage retained: {data_class}", f"{usd:,.2f}"]
        for data_class, usd in sorted(bill["storage_usd_by_class"].items(), key=lambda kv: -kv[1])
    ]
    rows += [
        [
            f"pipeline run requests ({bill['pipeline_core_hours']:,.0f} core-hours not priced)",
            f"{bill['pipeline_request_usd']:,.2f}",
        ],
        ["training reads (range GETs)", f"{bill['training_request_usd']:,.2f}"],
        ["total", f"{bill['total_usd']:,.2f}"],
    ]
    return Table(["item", "$ / month"], rows, strong_rows=frozenset({len(rows) - 1}))
