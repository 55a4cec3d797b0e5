"""Format readers: every quarantine reason, byte-range splits, compression, local == S3."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipeline.core.storage import Location
from pipeline.core.text import derived_id
from pipeline.ingest.listing import cut_units, list_inputs
from pipeline.ingest.readers import read_piece
from pipeline.ingest.records import DOCS_SCHEMA, QUARANTINE_SCHEMA


def write_tree(folder: Path, files: dict[str, bytes]) -> Location:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return Location.from_uri(str(folder))


def parquet_bytes(table: pa.Table, **kwargs) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **kwargs)
    return buffer.getvalue()


def read_root(
    root: Location, unit_bytes: int = 2**30, id_field: str | None = "id", batch_docs: int = 4096
) -> tuple[pa.Table, pa.Table]:
    """List, cut and read everything under root; (docs, quarantine) in reading order."""
    inputs, _ = list_inputs(root, ["**"], [])
    docs, bad = [DOCS_SCHEMA.empty_table()], [QUARANTINE_SCHEMA.empty_table()]
    for piece in cut_units(inputs, unit_bytes).to_pylist():
        for d, q in read_piece(root, piece, "text", id_field, batch_docs=batch_docs):
            assert d.schema == DOCS_SCHEMA and q.schema == QUARANTINE_SCHEMA
            assert d.num_rows <= batch_docs and q.num_rows <= batch_docs
            docs.append(d)
            bad.append(q)
    return pa.concat_tables(docs), pa.concat_tables(bad)


def read_files(tmp_path: Path, files: dict[str, bytes], **kwargs) -> tuple[list, list]:
    docs, bad = read_root(write_tree(tmp_path / "in", files), **kwargs)
    return (
        [(d["doc_id"], d["source"], d["row"], d["text"]) for d in docs.to_pylist()],
        [(q["source"], q["row"], q["reason"]) for q in bad.to_pylist()],
    )


def offsets(lines: list[bytes]) -> list[int]:
    out, at = [], 0
    for line in lines:
        out.append(at)
        at += len(line)
    return out


# -- JSONL records and every record-level reason ---------------------------------------------
CRAFTED = [
    b'{"id": "a", "text": "hello"}\n',
    b'{"id": 7, "text": "integer id"}\n',
    b'{"text": "no id"}\n',
    b'{"id": "x", "text": \n',  # malformed_json
    b"[1, 2]\n",  # an array: two records, each malformed_json (not an object)
    b'{"id": "u", "text": "\xff\xfe"}\n',  # invalid_utf8
    b'{"id": "e", "text": " \\t\\n "}\n',  # empty_text
    b'{"id": "m"}\n',  # missing_text
    b'{"id": "n", "text": null}\n',  # missing_text
    b'{"id": "s", "text": 5}\n',  # non_string_text
    b'{"id": [1], "text": "list id"}\n',  # invalid_id
    b'{"id": 1.5, "text": "float id"}\n',  # invalid_id
    b"   \n",  # blank: not a record
    b'{"id": "z", "text": "last, no newline"}',
]
AT = offsets(CRAFTED)


def crafted_expected(source: str) -> tuple[list, list]:
    """(docs, quarantine) that CRAFTED must give when stored under `source`."""
    docs = [
        ("a", source, AT[0], "hello"),
        ("7", source, AT[1], "integer id"),
        (derived_id(source, AT[2]), source, AT[2], "no id"),
        ("z", source, AT[13], "last, no newline"),
    ]
    reasons = {
        3: "malformed_json",
        4: "malformed_json",
        5: "invalid_utf8",
        6: "empty_text",
        7: "missing_text",
        8: "missing_text",
        9: "non_string_text",
        10: "invalid_id",
        11: "invalid_id",
    }
    bad = [(source, AT[i], reason) for i, reason in reasons.items()]
    bad.insert(2, (source, AT[4] + 1, "malformed_json"))  # the array's second element
    return docs, bad


def test_jsonl_records_and_record_level_reasons(tmp_path: Path) -> None:
    docs, bad = read_files(tmp_path, {"c.jsonl": b"".join(CRAFTED)})
    assert (docs, bad) == crafted_expected("c.jsonl")


def test_a_lone_surrogate_escape_is_quarantined_not_a_crash(tmp_path: Path) -> None:
    """json.loads turns "\\ud800" into a str that no UTF-8 text can hold: before, the unit's
    Arrow table could not be built and the whole read task failed."""
    lines = [
        b'{"id": "a", "text": "fine \\u00e9t\\u00e9"}\n',  # escapes of real characters: kept
        b'{"id": "b", "text": "half a pair \\ud800 here"}\n',
        b'{"id": "\\udfff", "text": "the id is the lone half"}\n',
        b'{"id": "c", "text": "a pair \\ud83d\\ude00 is one character"}\n',
    ]
    docs, bad = read_files(tmp_path, {"s.jsonl": b"".join(lines)})
    at = offsets(lines)
    assert [(d[0], d[3]) for d in docs] == [
        ("a", "fine \u00e9t\u00e9"),
        ("c", "a pair \U0001f600 is one character"),
    ]
    assert [(b[1], b[2]) for b in bad] == [(at[1], "invalid_utf8"), (at[2], "invalid_utf8")]


@pytest.mark.parametrize(
    "name, compress", [("c.jsonl.gz", gzip.compress), ("c.ndjson.zst", zstandard.compress)]
)
def test_compressed_jsonl_reads_like_plain(tmp_path: Path, name, compress) -> None:
    docs, bad = read_files(tmp_path, {name: compress(b"".join(CRAFTED))})
    assert (docs, bad) == crafted_expected(name)  # rows: offsets in the decompressed stream


def test_without_id_field_every_id_is_derived(tmp_path: Path) -> None:
    docs, bad = read_files(tmp_path, {"c.jsonl": b"".join(CRAFTED)}, id_field=None)
    assert [d[0] for d in docs] == [derived_id("c.jsonl", d[2]) for d in docs]
    assert len(docs) == 6  # the two invalid ids are not looked at any more
    assert "invalid_id" not in {reason for *_, reason in bad}


def test_batches_are_bounded(tmp_path: Path) -> None:
    data = b"".join(b'{"text": "t%d"}\n' % i for i in range(10)) + b"nope\n" * 7
    docs, bad = read_files(tmp_path, {"c.jsonl": data}, batch_docs=3)  # asserts <= 3 per batch
    assert [d[3] for d in docs] == [f"t{i}" for i in range(10)]
    assert len(bad) == 7


# -- truncation, multi-frame, file-level reasons ---------------------------------------------
MANY = [b'{"text": "line %d %s"}\n' % (i, b"x" * (i % 37)) for i in range(12_000)]


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".zst", zstandard.compress)])
def test_truncated_stream_keeps_records_before_it(tmp_path: Path, suffix, compress) -> None:
    packed = compress(b"".join(MANY))
    docs, bad = read_files(tmp_path, {f"t.jsonl{suffix}": packed[: len(packed) * 6 // 10]})
    line_at = offsets(MANY)
    assert 0 < len(docs) < len(MANY)
    assert [d[2] for d in docs] == line_at[: len(docs)]  # a prefix, in order
    assert [d[3] for d in docs] == [json.loads(line)["text"] for line in MANY[: len(docs)]]
    assert bad == [(f"t.jsonl{suffix}", line_at[len(docs)], "truncated_file")]


def test_multi_frame_zstd_is_read_to_the_end(tmp_path: Path) -> None:
    half = len(MANY) // 2
    data = zstandard.compress(b"".join(MANY[:half])) + zstandard.compress(b"".join(MANY[half:]))
    docs, bad = read_files(tmp_path, {"t.jsonl.zst": data})
    assert len(docs) == len(MANY) and bad == []


def test_file_level_reasons(tmp_path: Path) -> None:
    table = pa.table({"id": [1, 2], "body": ["a", "b"]})
    docs, bad = read_files(
        tmp_path,
        {
            "empty.jsonl": b"",
            "empty.parquet": b"",
            "no_text.parquet": parquet_bytes(table),
            "int_text.parquet": parquet_bytes(pa.table({"text": [1, 2]})),
            "garbage.parquet": b"this is not parquet at all",
            "not_gzip.jsonl.gz": b'{"text": "plain"}\n',
        },
    )
    assert docs == []
    assert sorted(bad) == sorted(
        [
            ("empty.jsonl", -1, "empty_file"),
            ("empty.parquet", -1, "empty_file"),
            ("no_text.parquet", -1, "missing_text_column"),
            ("int_text.parquet", -1, "non_string_text"),
            ("garbage.parquet", -1, "unreadable"),
            ("not_gzip.jsonl.gz", -1, "unreadable"),
        ]
    )


def test_missing_object_is_unreadable_with_the_error(tmp_path: Path) -> None:
    piece = {
        "path": "gone.jsonl",
        "start": 0,
        "end": 10,
        "size": 10,
        "format": "jsonl",
        "compression": "none",
    }
    batches = list(read_piece(Location.from_uri(str(tmp_path)), piece, "text", "id"))
    bad = pa.concat_tables([q for _, q in batches]).to_pylist()
    assert [(q["row"], q["reason"]) for q in bad] == [(-1, "unreadable")]
    assert "FileNotFoundError" in bad[0]["detail"]


# -- text files ------------------------------------------------------------------------------
def test_text_files(tmp_path: Path) -> None:
    docs, bad = read_files(
        tmp_path,
        {
            "a.txt": "héllo\nworld\n".encode(),
            "b.md.gz": gzip.compress(b"# title\n"),
            "c.txt": b"bad \xff utf8",
            "d.txt": b" \n\t ",
            "e.txt.gz": gzip.compress(b"".join(MANY))[:5000],
        },
    )
    assert docs == [
        (derived_id("a.txt", 0), "a.txt", 0, "héllo\nworld\n"),
        (derived_id("b.md.gz", 0), "b.md.gz", 0, "# title\n"),
    ]
    assert bad == [
        ("c.txt", 0, "invalid_utf8"),
        ("d.txt", 0, "empty_text"),
        ("e.txt.gz", 0, "truncated_file"),
    ]


# -- Parquet ---------------------------------------------------------------------------------
def test_parquet_rows_and_reasons(tmp_path: Path) -> None:
    table = pa.table(
        {"id": pa.array([10, 11, None, 13, 14], pa.int64()), "text": ["a", None, "c", "  ", "e"]}
    )
    docs, bad = read_files(tmp_path, {"p.parquet": parquet_bytes(table, row_group_size=2)})
    assert docs == [
        ("10", "p.parquet", 0, "a"),
        (derived_id("p.parquet", 2), "p.parquet", 2, "c"),
        ("14", "p.parquet", 4, "e"),
    ]
    assert bad == [("p.parquet", 1, "missing_text"), ("p.parquet", 3, "empty_text")]


# -- splits: every record exactly once, whatever the unit size -------------------------------
def varied_lines(n: int) -> list[bytes]:
    lines = []
    for i in range(n):
        if i % 17 == 5:
            lines.append(b"{broken\n")
        elif i % 23 == 7:
            lines.append(b"\n")
        else:
            lines.append(json.dumps({"id": i, "text": "w" * (i * 7 % 90 + 1)}).encode() + b"\n")
    return lines


def test_jsonl_byte_range_split_reads_every_line_once(tmp_path: Path) -> None:
    lines = varied_lines(120)
    root = write_tree(tmp_path / "in", {"s.jsonl": b"".join(lines)})
    size = len(b"".join(lines))
    whole_docs, whole_bad = read_root(root)
    line_at = offsets(lines)
    assert whole_docs["row"].to_pylist() == [
        at for at, line in zip(line_at, lines, strict=True) if line.startswith(b'{"id"')
    ]
    assert whole_bad["row"].to_pylist() == [
        at for at, line in zip(line_at, lines, strict=True) if line == b"{broken\n"
    ]
    for unit in (1, 7, 50, 64, 333, 1000, size // 3, size - 1, size):
        docs, bad = read_root(root, unit_bytes=unit)
        assert docs.sort_by("row").equals(whole_docs), unit  # all there, none twice
        assert bad.sort_by("row").equals(whole_bad), unit


def test_parquet_row_group_split_reads_every_row_once(tmp_path: Path) -> None:
    n = 400
    table = pa.table(
        {"id": [f"r{i}" for i in range(n)], "text": [f"text {i} " * (i % 9 + 1) for i in range(n)]}
    )
    data = parquet_bytes(table, row_group_size=25, compression="none")
    root = write_tree(tmp_path / "in", {"p.parquet": data})
    for unit in (100, 1000, 2500, len(data) // 3, len(data) - 1, len(data)):
        docs, bad = read_root(root, unit_bytes=unit, batch_docs=10)
        docs = docs.sort_by("row")
        assert docs["row"].to_pylist() == list(range(n)), unit
        assert docs["doc_id"].to_pylist() == table["id"].to_pylist()
        assert docs["text"].to_pylist() == table["text"].to_pylist()
        assert bad.num_rows == 0


# -- local and S3 read the same documents ----------------------------------------------------
def test_local_and_s3_read_the_same(tmp_path: Path, s3_upload) -> None:
    files = {
        "c.jsonl": b"".join(CRAFTED),
        "s/split.jsonl": b"".join(varied_lines(200)),
        "s/g.jsonl.gz": gzip.compress(b"".join(MANY[:500])),
        "s/z.ndjson.zst": zstandard.compress(b"".join(MANY[500:900])),
        "p.parquet": parquet_bytes(
            pa.table({"text": [f"t{i}" for i in range(300)]}), row_group_size=50
        ),
        "t/a.txt": b"a text file",
        "t/empty.txt": b"",
    }
    local = write_tree(tmp_path / "in", files)
    remote = s3_upload(files)
    for unit in (2000, 2**30):
        local_docs, local_bad = read_root(local, unit_bytes=unit)
        s3_docs, s3_bad = read_root(remote, unit_bytes=unit)
        assert local_docs.num_rows > 1000
        assert s3_docs.equals(local_docs)
        assert s3_bad.equals(local_bad)


def test_a_multi_line_json_array_is_quarantined_with_the_json_lines_hint(tmp_path):
    """`.json` is read as JSON Lines: a pretty-printed array fails line by line, and the
    detail says why (it said only "Expecting value: line 1 column 2")."""
    text = json.dumps([{"text": "a"}, {"text": "b"}], indent=2).encode()
    docs, bad = read_root(write_tree(tmp_path / "in", {"records.json": text}))
    assert docs.num_rows == 0
    rows = bad.to_pylist()
    assert rows and {r["reason"] for r in rows} == {"malformed_json"}
    assert all("read as JSON Lines" in r["detail"] for r in rows)


def test_integer_ids_past_64_bits_stay_exact(tmp_path: Path) -> None:
    """The fast JSON parser rounds integers past 64 bits to floats; such a record is parsed
    again by json.loads, so its id is the integer's exact digits."""
    lines = [
        b'{"id": 123456789012345678901234567890, "text": "a long id"}\n',
        b'{"id": 18446744073709551615, "text": "the largest 64-bit id"}\n',
        b'{"id": 7, "text": "x", "v": 1e400}\n',  # a value only json.loads reads (inf)
    ]
    docs, bad = read_files(tmp_path, {"s.jsonl": b"".join(lines)})
    assert [d[0] for d in docs] == ["123456789012345678901234567890", "18446744073709551615", "7"]
    assert bad == []
