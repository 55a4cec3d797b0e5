"""Web archives and HTML files read into documents (ingest/web_archive.py): which records become
documents, how HTTP bodies are decoded, how a file is cut into units, and bad archives."""

from __future__ import annotations

import gzip
import zlib
from collections import Counter
from pathlib import Path

import pytest
from support.warc import (
    Record,
    brotli_bytes,
    chunked,
    members,
    page,
    per_record_gzip,
    request,
    uncompressed,
    warcinfo,
    whole_stream_gzip,
)

from pipeline.core.storage import Location
from pipeline.ingest import web_archive
from pipeline.ingest.http_payload import html_text
from pipeline.ingest.listing import cut_units, detect_format, list_inputs
from pipeline.ingest.readers import read_piece

KEEP = ("url", "date")


def read_folder(folder: Path, unit_bytes: int = 64 << 20, max_doc_bytes: int = 16 << 20):
    """(documents, quarantine rows, records by kind) of every piece of the folder's listing."""
    root = Location.from_uri(str(folder))
    inputs, _ = list_inputs(root, ["**"], [])
    units = cut_units(inputs, unit_bytes)
    docs, bad, records = [], [], Counter()
    for piece in units.to_pylist():
        for d, b in read_piece(
            root, piece, "text", "id", keep_fields=KEEP, records=records,
            max_doc_bytes=max_doc_bytes,
        ):  # fmt: skip
            docs += d.to_pylist()
            bad += b.to_pylist()
    return docs, bad, records


def write(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder


def mixed_records() -> list[Record]:
    """One of each record a crawl holds: documents (plain, gzip, chunked+brotli) and others."""
    gz = page(2)
    gz.body = gzip.compress(gz.body)
    gz.headers = [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
    deflate = page(6)  # raw deflate, as many servers send `deflate`
    packer = zlib.compressobj(wbits=-15)
    deflate.body = packer.compress(deflate.body) + packer.flush()
    deflate.headers = [("Content-Type", "text/html"), ("Content-Encoding", "deflate")]
    br = page(3)
    br.body = chunked(brotli_bytes(br.body))
    br.headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "br"),
                  ("Transfer-Encoding", "chunked")]  # fmt: skip
    return [
        warcinfo(),
        request("http://example.com/0"),
        page(0),
        Record(kind="metadata", url="http://example.com/0", body=b"fetchTimeMs: 3", http=False),
        page(1),
        Record(url="http://example.com/missing", status="404 Not Found"),
        Record(url="http://example.com/moved", status="301 Moved Permanently"),
        Record(
            url="http://example.com/logo.png",
            headers=[("Content-Type", "image/png")],
            body=b"\x89PNG",
        ),  # fmt: skip
        Record(kind="revisit", url="http://example.com/1", body=b"", http=False),
        gz,
        br,
        deflate,
        Record(url="http://example.com/empty", body=b"<html><body></body></html>"),
    ]


EXPECTED_KINDS = {
    "warcinfo": 1, "request": 1, "metadata": 1, "revisit": 1, "status_4xx": 1,
    "status_3xx": 1, "not_html": 1, "no_text": 1, "documents": 5,
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "compressed"),
    [("a.warc.gz", per_record_gzip), ("a.warc.gz", whole_stream_gzip), ("a.warc", uncompressed)],
)
def test_response_records_become_documents_and_the_rest_is_counted(tmp_path, name, compressed):
    records = mixed_records()
    docs, bad, kinds = read_folder(write(tmp_path / "in", name, compressed(records)))
    assert bad == []
    assert dict(kinds) == EXPECTED_KINDS
    pages = [records[i] for i in (2, 4, 9, 10, 11)]
    assert [d["doc_id"] for d in docs] == [r.record_id for r in pages]
    assert [d["keep.url"] for d in docs] == [r.url for r in pages]
    assert {d["keep.date"] for d in docs} == {"2024-05-01T12:00:00Z"}
    for i, d in zip((0, 1, 2, 3, 6), docs, strict=True):  # extracted text, not HTML
        assert f"Page {i} says:" in d["text"] and "<p>" not in d["text"]


def test_a_per_record_gzip_rows_are_member_offsets(tmp_path):
    records = [warcinfo(), page(0), page(1), page(2)]
    parts = members(records)
    offsets = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    docs, _, _ = read_folder(write(tmp_path / "in", "a.warc.gz", b"".join(parts)))
    assert [d["row"] for d in docs] == offsets[1:]  # one range GET from row fetches the record
    for offset in offsets[1:]:
        data = (tmp_path / "in" / "a.warc.gz").read_bytes()[offset:]
        assert zlib.decompressobj(wbits=31).decompress(data).startswith(b"WARC/1.0")


def test_wet_conversion_records_are_documents_as_they_are(tmp_path):
    text = "Plain text of the page.\nSecond line, café."
    wet = [warcinfo(), Record(kind="conversion", url="http://example.com/t",
                              body=text.encode(), http=False)]  # fmt: skip
    docs, bad, kinds = read_folder(write(tmp_path / "in", "x.warc.wet.gz", per_record_gzip(wet)))
    assert [d["text"] for d in docs] == [text] and bad == []
    assert dict(kinds) == {"warcinfo": 1, "documents": 1}


def test_formats_from_file_names():
    assert detect_format("CC-MAIN-1.warc.gz") == ("warc", "gzip")
    assert detect_format("a.warc") == ("warc", "none")
    assert detect_format("CC-MAIN-1.warc.wet.gz") == ("warc", "gzip")
    assert detect_format("page.html") == ("html", "none")
    assert detect_format("page.HTM") == ("html", "none")


def test_html_file_is_one_document_in_its_meta_charset(tmp_path):
    html = '<html><head><meta charset="windows-1252"></head><body><article><p>Caf\xe9 cr\xe8me'
    html += " is served every morning in the small room.</p></article></body></html>"
    docs, bad, _ = read_folder(write(tmp_path / "in", "p.html", html.encode("cp1252")))
    assert bad == [] and len(docs) == 1
    assert "Café crème" in docs[0]["text"] and docs[0]["keep.url"] is None


@pytest.mark.parametrize(
    ("body", "header", "expected"),
    [
        ("h\xe9".encode("latin-1"), "iso-8859-1", "hé"),  # the HTTP header's charset
        (b"\xef\xbb\xbf" + "h\xe9".encode(), "iso-8859-1", "hé"),  # a BOM wins over the header
        (b'<meta charset="koi8-r">' + "привет".encode("koi8-r"), None, "привет"),  # <meta>
    ],
)
def test_charset_order(body, header, expected):
    assert html_text(body, header).endswith(expected)


def test_charset_detected_without_header_or_meta():
    text = "Съешь же ещё этих мягких французских булок, да выпей чаю. " * 20
    assert html_text(text.encode("windows-1251")) == text


def test_warc_truncated_records_are_documents_and_counted(tmp_path):
    cut = page(0)
    cut.warc_headers = [("WARC-Truncated", "length")]
    docs, bad, kinds = read_folder(write(tmp_path / "in", "a.warc.gz", per_record_gzip([cut])))
    assert len(docs) == 1 and bad == [] and kinds["warc_truncated"] == 1


@pytest.mark.parametrize("unit_bytes", [300, 1000, 2000, 1 << 20])
def test_every_record_is_read_once_however_the_file_is_cut(tmp_path, unit_bytes):
    records = [warcinfo(), *(page(i, words=30 + i) for i in range(40))]
    folder = write(tmp_path / "in", "a.warc.gz", per_record_gzip(records))
    write(folder, "b.warc.gz", whole_stream_gzip(records[::-1]))
    docs, bad, kinds = read_folder(folder, unit_bytes=unit_bytes)
    whole, _, _ = read_folder(folder)
    assert bad == [] and kinds["documents"] == 80 and kinds["warcinfo"] == 2
    assert sorted((d["source"], d["row"], d["doc_id"]) for d in docs) == sorted(
        (d["source"], d["row"], d["doc_id"]) for d in whole
    )


def test_a_file_cut_in_its_last_record_keeps_the_records_before(tmp_path):
    records = [page(i) for i in range(5)]
    data = per_record_gzip(records)
    last = len(data) - len(members(records)[-1])
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", data[:-25]))
    assert [d["doc_id"] for d in docs] == [r.record_id for r in records[:4]]
    assert [(b["row"], b["reason"], b["records"]) for b in bad] == [(last, "truncated_file", 1)]
    assert bad[0]["doc_id"] == records[4].record_id


def _last_kinds() -> dict[str, Record]:
    """Records that are no document (their payload is not kept), each ending a file."""
    big = page(9)
    big.body = b"<html><body><p>" + b"x " * 5000 + b"</p></body></html>"
    return {
        "metadata": Record(kind="metadata", url="http://example.com/0",
                           body=b"fetchTimeMs: 3\r\n" * 20, http=False),  # fmt: skip
        "request": request("http://example.com/9"),
        "status_4xx": Record(url="http://example.com/missing", status="404 Not Found",
                             body=b"<html>gone</html>" * 20),  # fmt: skip
        "not_html": Record(url="http://example.com/logo.png", body=b"\x89PNG" * 100,
                           headers=[("Content-Type", "image/png")]),  # fmt: skip
        "too_large": big,
    }


@pytest.mark.parametrize("layout", ["per-record gzip", "uncompressed"])
@pytest.mark.parametrize("where", ["header", "payload"])
@pytest.mark.parametrize("kind", list(_last_kinds()))
def test_a_cut_record_that_is_no_document_is_counted_once(tmp_path, layout, where, kind):
    """Every record is counted once: a record cut by the end of the file is one truncated_file
    row at its own offset, never also counted under its kind (the kinds and the quarantined
    add up to the records in the file)."""
    last = _last_kinds()[kind]
    records = [warcinfo(), page(0), page(1), last]
    whole = last.to_bytes()
    keep = 60 if where == "header" else len(whole) - 30  # inside WARC-Type, or the payload
    if layout == "uncompressed":
        at = len(uncompressed(records[:-1]))
        data, name = uncompressed(records[:-1]) + whole[:keep], "a.warc"
    else:
        at = len(per_record_gzip(records[:-1]))
        packer = zlib.compressobj(wbits=31)
        cut_member = packer.compress(whole[:keep]) + packer.flush(zlib.Z_SYNC_FLUSH)
        data, name = per_record_gzip(records[:-1]) + cut_member, "a.warc.gz"
    docs, bad, kinds = read_folder(write(tmp_path / "in", name, data), max_doc_bytes=1000)
    assert [d["doc_id"] for d in docs] == [records[1].record_id, records[2].record_id]
    assert [(b["row"], b["reason"], b["records"]) for b in bad] == [(at, "truncated_file", 1)]
    assert sum(kinds.values()) == len(records), kinds  # 3 whole records + the cut one
    assert kinds["quarantined"] == 1 and kinds.get(kind, 0) == 0


def test_a_whole_stream_cut_keeps_the_records_before(tmp_path):
    records = [page(i) for i in range(5)]
    cut = whole_stream_gzip(records)[:-40]
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", cut))
    assert [d["doc_id"] for d in docs] == [r.record_id for r in records[:4]]
    assert [b["reason"] for b in bad] == ["truncated_file"]


def test_a_corrupt_member_is_quarantined_and_reading_goes_on(tmp_path):
    records = [page(i) for i in range(5)]
    parts = members(records)
    damaged = parts[2][:20] + bytes(b ^ 0x55 for b in parts[2][20:40]) + parts[2][40:]
    at = len(parts[0]) + len(parts[1])
    data = parts[0] + parts[1] + damaged + parts[3] + parts[4]
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", data))
    assert [d["doc_id"] for d in docs] == [records[i].record_id for i in (0, 1, 3, 4)]
    assert [(b["row"], b["reason"]) for b in bad] == [(at, "corrupt_record")]


def test_a_member_that_is_not_a_warc_record_is_quarantined_and_reading_goes_on(tmp_path):
    records = [page(i) for i in range(3)]
    parts = members(records)
    junk = gzip.compress(b"this member holds no WARC record\r\n\r\n")
    data = parts[0] + junk + parts[1] + parts[2]
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", data))
    assert [d["doc_id"] for d in docs] == [r.record_id for r in records]
    assert [(b["row"], b["reason"]) for b in bad] == [(len(parts[0]), "corrupt_record")]


def test_garbage_inside_an_uncompressed_warc_is_quarantined_with_the_bytes_left(tmp_path):
    records = [page(i) for i in range(4)]
    head = uncompressed(records[:2])
    data = head + b"garbage\r\n\r\n" + uncompressed(records[2:])
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc", data))
    assert [d["doc_id"] for d in docs] == [r.record_id for r in records[:2]]
    assert [b["reason"] for b in bad] == ["corrupt_record"]
    assert 0 < bad[0]["bytes"] <= len(data) - len(head) + len(records[1].to_bytes())


@pytest.mark.parametrize(
    ("name", "data"),
    [("a.warc.gz", gzip.compress(b'{"text": "json, not WARC"}\n', mtime=0)),
     ("b.warc.gz", b"plain" * 9), ("c.warc", b"<html>not an archive</html>")],
    ids=["gzip-json", "plain-bytes", "html"],  # stable ids: xdist's workers must collect the same
)  # fmt: skip
def test_a_file_that_is_not_a_warc_is_one_file_level_row(tmp_path, name, data):
    docs, bad, _ = read_folder(write(tmp_path / "in", name, data))
    assert docs == [] and [(b["row"], b["reason"]) for b in bad] == [(-1, "unreadable")]
    assert "not a WARC file" in bad[0]["detail"]


def test_a_record_over_the_cap_is_too_large(tmp_path):
    big = page(1)
    big.body = b"<html><body><p>" + b"x " * 5000 + b"</p></body></html>"
    records = [page(0), big, page(2)]
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", per_record_gzip(records)),
                               max_doc_bytes=4000)  # fmt: skip
    assert [d["doc_id"] for d in docs] == [records[0].record_id, records[2].record_id]
    assert [(b["reason"], b["doc_id"]) for b in bad] == [("too_large", big.record_id)]


def test_a_body_that_inflates_past_the_cap_is_too_large(tmp_path):
    bomb = page(1)
    bomb.body = gzip.compress(b"<html><body><p>" + b"a" * 100_000 + b"</p></body></html>")
    bomb.headers = [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", per_record_gzip([bomb])),
                               max_doc_bytes=10_000)  # fmt: skip
    assert docs == [] and [b["reason"] for b in bad] == ["too_large"]


def test_an_unknown_content_encoding_is_undecodable(tmp_path):
    odd = page(1)
    odd.headers = [("Content-Type", "text/html"), ("Content-Encoding", "compress")]
    docs, bad, _ = read_folder(write(tmp_path / "in", "a.warc.gz", per_record_gzip([odd])))
    assert docs == [] and [b["reason"] for b in bad] == ["undecodable_payload"]


def test_block_list_on_a_warc_url(tmp_path):
    """The kept `url` is what curation's block_list judges (curate/block_list.py)."""
    import pyarrow as pa

    from pipeline.curate import chain

    records = [page(0), page(1)]
    records[1].url = "http://spam.example.org/offer"
    docs, _, _ = read_folder(write(tmp_path / "in", "a.warc.gz", per_record_gzip(records)))
    (tmp_path / "domains.txt").write_text("example.org\n")
    steps = chain.parse([{"block_list": {"domains_file": str(tmp_path / "domains.txt")}}])
    outcome = chain.apply(chain.build(steps), pa.Table.from_pylist(docs))
    assert outcome.kept["doc_id"].to_pylist() == [records[0].record_id]
    assert outcome.removed["doc_id"].to_pylist() == [records[1].record_id]


def test_dry_run_preview_is_the_first_document_extracted(tmp_path):
    from pipeline.ingest.first_record import first_record

    records = [warcinfo(), request(), page(4), page(5)]
    folder = write(tmp_path / "in", "a.warc.gz", per_record_gzip(records))
    found = first_record(Location.from_uri(str(folder / "a.warc.gz")), "warc", "gzip", 1 << 20)
    fields = found["fields"]
    assert fields["WARC-Record-ID"] == records[2].record_id and fields["url"] == records[2].url
    assert fields["page text"].startswith("Title 4") and "<p>" not in fields["page text"]


def test_the_reader_adds_up_the_seconds_of_its_parts(tmp_path):
    folder = write(tmp_path / "in", "a.warc.gz", per_record_gzip(mixed_records()))
    root = Location.from_uri(str(folder))
    [piece] = cut_units(list_inputs(root, ["**"], [])[0], 64 << 20).to_pylist()
    seconds: Counter = Counter()
    for _ in read_piece(root, piece, "text", "id", seconds=seconds):
        pass
    assert set(seconds) == set(web_archive.PARTS)
    assert all(s > 0 for s in seconds.values())


def test_a_jsonl_piece_reports_no_reader_parts(tmp_path):
    folder = write(tmp_path / "in", "a.jsonl", b'{"id": "1", "text": "one"}\n')
    root = Location.from_uri(str(folder))
    [piece] = cut_units(list_inputs(root, ["**"], [])[0], 64 << 20).to_pylist()
    seconds: Counter = Counter()
    assert sum(d.num_rows for d, _ in read_piece(root, piece, "text", "id", seconds=seconds)) == 1
    assert seconds == Counter()
