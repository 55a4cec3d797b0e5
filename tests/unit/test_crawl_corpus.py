"""make_crawl_corpus: WARC files of pages whose markup outweighs their text, the same bytes for
the same seed, readable record by record."""

from __future__ import annotations

from pipeline.bench import extract_parts
from pipeline.tools import make_crawl_corpus


def test_a_small_corpus_is_deterministic_and_reads_back(tmp_path):
    first = make_crawl_corpus.build(tmp_path / "a", 300_000, 0, file_bytes=150_000)
    again = make_crawl_corpus.build(tmp_path / "b", 300_000, 0, file_bytes=150_000)
    names = [f["file"] for f in first["files"]]
    assert len(names) >= 2 and names == [f["file"] for f in again["files"]]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    files = extract_parts.archive_files(tmp_path / "a")
    records, bodies = extract_parts.parse_fastwarc(files)
    assert len(bodies) == first["pages"] and records > 3 * first["pages"]  # + request, metadata
    htmls = extract_parts.http_decode(bodies)
    assert sum(len(h.encode()) for h in htmls) == first["html_bytes"] >= 300_000
    texts = extract_parts.extract_all(htmls)
    assert all(texts) and sum(map(len, texts)) < 0.5 * sum(map(len, htmls))  # mostly markup
