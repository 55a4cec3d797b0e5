"""The shipped crawl sample (sample/crawl) is what its builder makes, the same bytes every
time, and holds what its README says: read back independently of the builder (warcio for the
record kinds, bench extract's own HTTP decoding and resiliparse for the pages)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from support import SAMPLE

from pipeline.bench import extract_parts
from pipeline.core.text import normalize
from pipeline.tools import make_crawl_sample
from pipeline.tools.crawl_truth import count_kinds

CRAWL = SAMPLE / "crawl"


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("crawl")
    make_crawl_sample.build(out, SAMPLE)
    return _files(out)


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((CRAWL / "_planted.json").read_text())


def test_the_builder_gives_the_same_bytes_twice(built, tmp_path):
    make_crawl_sample.build(tmp_path, SAMPLE)
    again = _files(tmp_path)
    assert list(again) == list(built)
    assert [n for n in built if again[n] != built[n]] == []


def test_the_shipped_sample_is_what_the_builder_makes(built):
    """Compressed files compare by content: another zlib build may pack the same bytes
    differently."""
    shipped = _files(CRAWL)
    assert sorted(shipped) == sorted(built)
    for name, data in built.items():
        if name.endswith(".gz"):
            assert gzip.decompress(shipped[name]) == gzip.decompress(data), name
        else:
            assert shipped[name] == data, name


def test_the_files_hold_every_record_kind_and_layout(truth):
    names = {r["file"] for r in truth["records"]}
    assert any(n.endswith(".warc") for n in names) and any(n.endswith(".wet.gz") for n in names)
    kinds: Counter = Counter()
    for name in names:
        kinds.update(count_kinds(CRAWL / name))
    assert set(kinds) == {"warcinfo", "request", "response", "metadata", "revisit", "conversion"}
    assert kinds["request"] == kinds["response"] == kinds["metadata"]  # one of each per fetch
    listed = Counter(r["type"] for r in truth["records"])
    assert {k: kinds[k] for k in listed} == dict(listed)  # every response, revisit, ... listed
    per_record = next(n for n in names if n.endswith("00000.warc.gz"))
    data = (CRAWL / per_record).read_bytes()
    offsets = [r["offset"] for r in truth["records"] if r["file"] == per_record]
    assert len(offsets) > 100 and all(data[o : o + 2] == b"\x1f\x8b" for o in offsets)
    assert sum(len(b) for b in _files(CRAWL).values()) < 2_000_000  # small enough for tests


def test_every_plant_is_there_and_each_page_carries_its_text(truth):
    """Decoded and extracted independently of the pipeline's reader: each HTML response that
    should become a document yields its text's words (the charset cases their non-ASCII
    characters too), each exact duplicate the very text of its original."""
    assert set(truth["plants"]) <= {r["plant"] for r in truth["records"]} | {"warcinfo"}
    files = extract_parts.archive_files(CRAWL)
    _, bodies = extract_parts.parse_fastwarc(files)
    texts = dict(
        zip(
            [b.record_id for b in bodies],
            extract_parts.extract_all(extract_parts.http_decode(bodies)),
            strict=True,
        )
    )
    html = [r for r in truth["records"] if r["type"] == "response" and r["document"]]
    assert {r["record_id"] for r in html} == set(texts)
    originals = _sample_texts()
    by_url = {r["url"]: r for r in html}
    recall = {}
    for r in html:
        if r["plant"] == "index_page":  # titles of other pages, no text of its own
            continue
        got, want = texts[r["record_id"]], originals[r["text_from"]]
        words = set(_words(want))
        recall[r["record_id"]] = len(words & set(_words(got))) / len(words)
        if r["plant"] in ("cp1252", "latin1_meta", "bom"):
            assert {c for c in want if ord(c) > 127} <= set(got), r["plant"]
        if r["plant"].startswith("exact"):
            assert texts[r["record_id"]] == texts[by_url[r["copy_of"]]["record_id"]], r["plant"]
    # resiliparse's main-content mode drops <ul> lists: a changelog page keeps little of its
    # items; the planted pages are prose and keep most of theirs (what precedes the cut)
    assert min(recall.values()) > 0
    for r in html:
        if r["plant"] not in ("page", "index_page"):
            floor = 0.25 if r["plant"].startswith("truncated") else 0.5
            assert recall[r["record_id"]] >= floor, (r["plant"], recall[r["record_id"]])
    near = [r["jaccard_to_original"] for r in truth["records"] if r["plant"] == "near"]
    assert near and all(0.8 <= j < 1 for j in near)


def _sample_texts() -> dict[str, str]:
    from pipeline.tools.crawl_plan import sample_texts

    return {t.origin: t.text for t in sample_texts(SAMPLE)}


def _words(text: str) -> list[str]:
    """The words that carry letters or digits (list bullets and rules differ in HTML)."""
    return [w for w in normalize(text).split(" ") if any(c.isalnum() for c in w)]


def test_rebuilding_the_sample_keeps_the_crawl_sample_beside_it(tmp_path):
    import random

    from pipeline.tools import make_sample

    (tmp_path / "crawl").mkdir()
    (tmp_path / "crawl" / "kept.warc").write_bytes(b"WARC/1.0")
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "stale.jsonl").write_text("{}\n")
    (tmp_path / "stale.txt").write_text("old")
    make_sample.write_sample(tmp_path, [], random.Random(0))
    assert (tmp_path / "crawl" / "kept.warc").read_bytes() == b"WARC/1.0"
    assert not (tmp_path / "web" / "stale.jsonl").exists()
    assert not (tmp_path / "stale.txt").exists()


def test_the_revisit_refers_to_a_capture_with_its_payload_digest(truth):
    from warcio.archiveiterator import ArchiveIterator

    (revisit,) = [r for r in truth["records"] if r["type"] == "revisit"]
    digests, found = {}, None
    with open(CRAWL / revisit["file"], "rb") as f:
        for rec in ArchiveIterator(f):
            h = rec.rec_headers
            if rec.rec_type == "response":
                digests[h.get_header("WARC-Record-ID")] = h.get_header("WARC-Payload-Digest")
            elif rec.rec_type == "revisit":
                found = (h.get_header("WARC-Refers-To"), h.get_header("WARC-Payload-Digest"))
    assert found is not None and digests[found[0]] == found[1]
