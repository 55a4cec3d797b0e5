"""bench extract: its figures on the crawl sample (present, finite, counting what the sample
holds; no timing bounds), its HTTP decoding on cut bodies, and its ratio arithmetic."""

from __future__ import annotations

import codecs
import gzip
import json
import math
from collections import Counter

from support import SAMPLE

from pipeline.bench import extract, extract_parts
from pipeline.tools.crawl_truth import count_kinds

CRAWL = SAMPLE / "crawl"


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def test_parts_on_the_crawl_sample_count_its_records_and_give_finite_rates(capsys):
    extract.main(["--input", str(CRAWL), "--no-run", "--repeat", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(out[-1])
    truth = json.loads((CRAWL / "_planted.json").read_text())
    kinds: Counter = Counter()
    for name in {r["file"] for r in truth["records"]}:
        kinds.update(count_kinds(CRAWL / name))  # warcio's count, not fastwarc's
    assert figures["records"] == sum(kinds.values())
    html_ok = [r for r in truth["records"] if r["type"] == "response" and r.get("status") == 200
               and "html" in (r.get("content_type") or "")]  # fmt: skip
    assert figures["html_docs"] == len(html_ok)
    assert figures["warcio_records"] == figures["records"]
    assert set(figures["seconds"]) == {"parse", "decode", "extract", "curate", "warcio_parse"}
    assert set(figures["mb_s_per_core"]) >= {"parse", "decode", "extract", "curate"}
    assert all(math.isfinite(x) and x > 0 for x in _numbers(figures["mb_s_per_core"]))
    assert all(math.isfinite(x) and x > 0 for x in _numbers(figures["seconds"]))
    assert math.isclose(sum(figures["share_of_parts"].values()), 1.0, abs_tol=0.01)
    assert 0 < figures["kept_by_chain"] < figures["html_docs"]  # configs/crawl.yaml's chain
    assert 0 < figures["text_mb"] < figures["html_mb"]
    assert "ratio" not in figures and "run" not in figures  # --no-run
    assert any(line.startswith("extract (resiliparse)") for line in out)


def test_decoding_keeps_what_arrived_of_a_cut_body():
    html = b"<html><body><p>" + b"words and more words " * 400 + b"</p></body></html>"
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (html[:3000], html[3000:]))
    assert extract_parts.dechunk(chunked + b"0\r\n\r\n") == html
    cut_chunked = extract_parts.dechunk(chunked[:4000])  # inside the second chunk
    assert 3000 < len(cut_chunked) < 4000 and html.startswith(cut_chunked)
    cut = gzip.compress(html, mtime=0)[:200]
    part = extract_parts.content_decode(cut, "gzip")
    assert part and html.startswith(part)


def test_charset_order_is_bom_header_meta_then_detection():
    def charset(body: bytes, header: str | None) -> tuple[str, int]:
        name, skip = extract_parts.charset_of(body, header)
        return codecs.lookup(name).name, skip

    meta = '<meta charset="iso-8859-1"><p>café</p>'.encode("latin-1")
    assert charset(b"\xef\xbb\xbf" + meta, "windows-1252") == ("utf-8", 3)
    assert charset(meta, "koi8-r") == ("koi8-r", 0)
    assert charset(meta, None) == ("cp1252", 0)  # WHATWG: ISO-8859-1 is windows-1252
    assert charset("<p>café, déjà vu</p>".encode(), None)[0] == "utf-8"


def test_the_ratio_is_extraction_time_over_the_runs_wall_time():
    seconds = {"parse": 0.5, "decode": 0.5, "extract": 2.0, "curate": 1.0}
    measured = {"records": 10, "html_docs": 4, "html_mb": 8.0, "text_mb": 1.0,
                "kept_by_chain": 2, "seconds": seconds}  # fmt: skip
    parts = {"tokenize": 1.0, "curate": 1.2, "extract": 1.5}
    run = {"wall_s": 5.0, "stages": {"read+hash": 4.0, "pack": 1.0}, "docs_out": 2,
           "tokens": 100, "read_parts_s": parts}  # fmt: skip
    figures = extract.figures_of(measured, run)
    assert figures["ratio"] == 0.4 and figures["meets_target"] is False
    assert figures["mb_s_per_core"]["extract"] == 4.0 and figures["run"]["mb_s_per_core"] == 1.6
    assert figures["run"]["read_pass_parts_s"]["rest"] == 0.3  # 4.0 - 1.0 - 1.2 - 1.5
    assert figures["mb_s_per_core"]["read_pass_parts"] == 2.0  # 8 MB / (0.5 + 0.5 + 2 + 1) s
    assert figures["ceiling_parts"] == 0.5  # 2.0 of the parts' 4.0 s
    assert figures["ratio_read_extract"] == 0.6  # (0.5 + 0.5 + 2.0) / 5.0


def test_without_a_run_the_ceiling_of_the_parts_is_still_given():
    seconds = {"parse": 1.0, "decode": 1.0, "extract": 6.0, "curate": 2.0}
    measured = {"records": 10, "html_docs": 4, "html_mb": 8.0, "text_mb": 1.0,
                "kept_by_chain": 2, "seconds": seconds}  # fmt: skip
    figures = extract.figures_of(measured, None)
    assert figures["ceiling_parts"] == 0.6 and "ratio_read_extract" not in figures
