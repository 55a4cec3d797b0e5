"""bench tokenize splits a mixed corpus into its long documents (encoded in pieces) and as many
bytes of short ones, and make_corpus --long-share builds such a corpus."""

from __future__ import annotations

import pyarrow as pa

from pipeline.bench.tokenize import Timed, _kind_figures, by_length
from pipeline.tokens.pieces import PIECE_CHARS
from pipeline.tools.make_corpus import joined_long
from pipeline.tools.real_text import RealText


def test_by_length_takes_the_long_documents_and_as_many_bytes_of_short_ones():
    long_text = "word " * (PIECE_CHARS // 5 + 1)  # just over PIECE_CHARS characters
    texts = ["a" * 1000] * 400 + [long_text, "b" * PIECE_CHARS]  # the last one is not long
    docs = pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts})
    kinds = by_length(docs)
    assert kinds["long"]["text"].to_pylist() == [long_text]
    short = kinds["short"]["text"].to_pylist()
    assert short == texts[: len(short)]  # the first ones, in corpus order
    size = sum(map(len, short))
    assert len(long_text) <= size < len(long_text) + 1000
    assert by_length(docs.slice(0, 400)) == {}  # no long document: nothing to compare


def test_kind_figures_give_per_byte_rates_without_the_probe():
    def runs(*seconds: float) -> list[Timed]:
        return [Timed(s, 1000, 2 * s, probe=0.5, probe_cpu=1.0) for s in seconds]

    figures = _kind_figures(
        {"long": runs(2.5, 1.5), "short": runs(1.5, 1.0)},
        {"long": 2, "short": 90},
        {"long": 4.0, "short": 4.0},
    )
    assert figures["long"] == {
        "docs": 2,
        "mb": 4.0,
        "tokens": 1000,
        "pipeline_mb_per_s": 4.0,
        "pipeline_tokens_per_s": 1000,
    }
    assert figures["short"]["pipeline_mb_per_s"] == 8.0
    assert figures["long_vs_short"] == round((0.5 + 0.5) / 2, 3)  # rounds: 1/2, 0.5/1
    assert figures["long_vs_short_cpu"] == round((2 / 4 + 1 / 2) / 2, 3)
    assert _kind_figures({}, {}, {}) == {}


def test_joined_long_puts_about_the_share_in_long_documents():
    docs = [RealText(f"f{i}", "man", f"document {i} " * 100) for i in range(2000)]
    out = list(joined_long(iter(docs), 0.25, 50_000))
    long = [d for d in out if d.kind == "long"]
    total = sum(len(d.text) for d in out)
    assert long and all(len(d.text) >= 50_000 for d in long)
    assert 0.2 < sum(len(d.text) for d in long) / total <= 0.25
    joined = [part for d in long for part in d.text.split("\n\n")]
    kept = [d.text for d in out if d.kind != "long"]
    order = {d.text: i for i, d in enumerate(docs)}  # each document once, in corpus order
    assert sorted(joined, key=order.get) == joined and sorted(kept, key=order.get) == kept
    assert len(set(joined + kept)) == len(joined) + len(kept) > 1900
    assert out == list(joined_long(iter(docs), 0.25, 50_000))  # deterministic
    assert list(joined_long(iter(docs), 0.0, 50_000)) == docs
