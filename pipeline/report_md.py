"""The cost report (report.py) as Markdown, for the terminal; helpers shared with the HTML page."""

from __future__ import annotations

from typing import Any


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    raise AssertionError


def usd(x: float) -> str:
    """Dollars: cents from a cent up, else up to 6 decimals (small test datasets cost little)."""
    sign = "-" if x < 0 else ""
    x = abs(x)
    if x == 0 or x >= 0.01:
        return f"{sign}${x:,.2f}"
    if x < 5e-7:
        return f"{sign}<$0.000001"
    return f"{sign}${x:.6f}".rstrip("0")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def retained_pairs(before: list[dict], after: list[dict]) -> list[tuple[str, str, dict, dict]]:
    """(data class, storage class, row now, row after) over both listings; absent rows are 0."""
    zero = {"objects": 0, "bytes": 0, "usd_month": 0.0}
    now = {(x["data_class"], x["storage_class"]): x for x in before}
    later = {(x["data_class"], x["storage_class"]): x for x in after}
    return [
        (c, s, now.get((c, s), zero), later.get((c, s), zero))
        for c, s in sorted(now.keys() | later.keys())
    ]


def monthly_rows(r: dict[str, Any]) -> list[list[str]]:
    """The monthly-cost table: (what, now, after the plan)."""
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
    return rows + [
        ["bytes retained", human_bytes(b["retained_bytes"]), human_bytes(f["retained_bytes"])],
        [
            "bytes read / month",
            human_bytes(b["read_bytes_per_month"]),
            human_bytes(f["read_bytes_per_month"]),
        ],
        ["retained / read", ratio(b), ratio(f)],
    ]


def format_markdown(r: dict[str, Any]) -> str:
    a, b, f = r["assumptions"], r["before"], r["after"]
    lines = [
        f"# Cost report: {r['dataset']}",
        "",
        f"{r['generated_at']} · prices per month, GB = {a['bytes_per_gb']:,} B ·"
        f" pipeline runs/month {a['runs_per_month']:g} (stats: {a['stats'] or 'none'}) ·"
        f" training epochs/month {a['epochs_per_month']:g} ({a['training_reads']})",
        "",
        "## Monthly cost",
        "",
    ]
    lines += _table(
        ["", "now", "after retention plan"],
        [[f"**{x}**" if x == "total" else x, y, z] for x, y, z in monthly_rows(r)],
    )
    once = r["apply_once"]
    lines += [
        "",
        f"The plan saves **{usd(r['savings_usd_per_month'])} per month**; applying it"
        f" once costs {usd(once['total_usd'])} ({once['copies']} COPY = "
        f"{usd(once['copy_usd'])}, minimum-duration charges"
        f" {usd(once['early_delete_usd'])}) and deletes {once['deletes']} objects"
        f" ({human_bytes(once['delete_bytes'])}).",
        "",
        "## Retained by data class and storage class",
        "",
    ]
    lines += _table(
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
            for c, sc, x, y in retained_pairs(b["retained"], f["retained"])
        ],
    )
    lines += [
        "",
        "## Pipeline and training I/O per month (priced at the storage classes after the plan)",
        "",
    ]
    lines += _table(
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
            for s in f["reads"]
        ],
    )
    lines += ["", "## Requests by type", ""]
    consumers = sorted({c for v in r["requests"].values() for c in v})
    lines += _table(
        ["kind", *consumers],
        [
            [k.upper(), *(f"{v.get(c, 0):,.0f}" for c in consumers)]
            for k, v in r["requests"].items()
        ],
    )
    lines += ["", "## Retained vs read by data class", ""]
    lines += _table(
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
    n = r["napkin"]
    if n:
        lines += [
            "",
            f"## One epoch of training: one object per document vs shards (version {n['version']})",
            "",
        ]
        lines += _table(
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
        if n["request_ratio"]:
            lines += [
                "",
                f"Small files need {n['request_ratio']:,.3g}x the GET requests of shards.",
            ]
    return "\n".join(lines) + "\n"
