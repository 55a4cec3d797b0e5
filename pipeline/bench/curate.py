"""Benchmark: the curation steps' speed (MB/s of text per core, each step alone and the whole
chain), their decisions against a restatement of the same definitions and, where datatrove is
installed (the `bench` extra), against datatrove's filters, on a real-text corpus.

    python -m pipeline.bench.curate (--input PATH | --mb N) [--limit-mb N] [--repeat 3]
                                    [--language-max-chars 2000]

The chain is FineWeb's order (configs/curate-web.yaml): language, Gopher repetition, Gopher
quality, C4, FineWeb quality, PII. Each step is timed over every document (not only the ones
the steps before it keep), on one thread, best of --repeat. The language step's word cache is
emptied before each timed run (its rows and the chain's: a worker's first sight of the text);
`language (warm)` runs it again on the text it has just read. Two checks of the decisions,
each the share of documents both keep or both remove:
- `restated`: restatements that share no code with pipeline/curate but restate its
  definitions: they check the implementation and cannot disagree on a definition (1.0 is
  expected, anything less is a bug).
- `datatrove`: datatrove's own filters (the `bench` extra; FineWeb at the paper's bound 0.1, C4
  with only its document rules), an implementation that can disagree: whitespace words and
  sentences ending in . ! ? stand in for its spaCy tokenizer; the rows under the table count
  the disagreements by the step's reason and datatrove's. The `c4_lines+c4` row is C4 as the
  paper runs it, the line rules before the page's, against datatrove's C4 with its line rules
  (its citation and long-word rules off: C4's paper has neither): datatrove counts a sentence
  per line, so with its line rule off (the `c4` row) every line counts one.
The language step's opt-in `max_chars` is timed too, its agreement with the step at its
default. Last line: a JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter

import pyarrow as pa

from pipeline.bench.minhash import add_corpus_args, corpus_texts
from pipeline.cli import args as cli_args
from pipeline.curate import chain, language
from pipeline.curate.text import SENTENCE_ENDS

PAPER_C4 = "c4_lines+c4"  # the bench's row for C4 as the paper runs it
CHAIN = [
    {"language": {"languages": ["en"], "min_score": 0.65}},
    {"gopher_repetition": {}},
    {"gopher_quality": {}},
    {"c4": {}},
    {"fineweb_quality": {}},
    {"pii": {}},
]


# -- independent restatements of the published rules ----------------------------------------
def ref_lines(text: str) -> list[str]:
    return [x.strip() for x in re.split(r"\n", text) if x.strip() != ""]


def ref_dup(items: list[str]) -> tuple[int, int]:
    counts = Counter(items)
    n = sum(c - 1 for c in counts.values())
    chars = sum((c - 1) * len(k) for k, c in counts.items())
    return n, chars


def ref_gopher_quality(text: str) -> bool:
    words = re.findall(r"\S+", text)
    n = len(words)
    if not 50 <= n <= 100_000:
        return False
    if not 3 <= sum(len(w) for w in words) / n <= 10:
        return False
    if text.count("#") > 0.1 * n or (text.count("...") + text.count("…")) > 0.1 * n:
        return False
    lines = ref_lines(text)
    if lines and sum(1 for x in lines if x[0] in "•-*‣◦▪●") > 0.9 * len(lines):
        return False
    if lines and sum(1 for x in lines if x.endswith("...") or x.endswith("…")) > 0.3 * len(lines):
        return False
    if sum(1 for w in words if re.search(r"[^\W\d_]", w)) < 0.8 * n:
        return False
    stop = {"the", "be", "to", "of", "and", "that", "have", "with"}
    punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~…«»“”‘’"
    return len(stop & {w.strip(punct).lower() for w in words}) >= 2  # two distinct ones


def ref_gopher_repetition(text: str) -> bool:
    lines = ref_lines(text)
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    for items, max_n, max_c in ((lines, 0.3, 0.2), (paras, 0.3, 0.2)):
        n, chars = ref_dup(items)
        total = sum(len(x) for x in items)
        if items and n / len(items) > max_n or total and chars / total > max_c:
            return False
    words = text.split()
    total = sum(len(w) for w in words)
    if not total:
        return True
    for k, bound in ((2, 0.2), (3, 0.18), (4, 0.16)):
        grams = Counter(tuple(words[i : i + k]) for i in range(len(words) - k + 1))
        count = max(grams.values(), default=0)
        if count > 1:  # of equally frequent n-grams, the longest
            chars = max(sum(len(w) for w in gram) for gram, c in grams.items() if c == count)
            if count * chars / total > bound:
                return False
    for k, bound in zip(range(5, 11), (0.15, 0.14, 0.13, 0.12, 0.11, 0.10), strict=True):
        seen, marked = set(), [False] * len(words)
        for i in range(len(words) - k + 1):
            gram = tuple(words[i : i + k])
            if gram in seen:  # a repeat: the occurrences after the first
                for j in range(i, i + k):
                    marked[j] = True
            seen.add(gram)
        if sum(len(w) for w, m in zip(words, marked, strict=True) if m) / total > bound:
            return False
    return True


def ref_c4(text: str) -> bool:
    low = text.lower()
    if "lorem ipsum" in low or "{" in text:
        return False
    return len(re.findall(r"[.!?]+(\s|$)", text)) >= 5


def ref_fineweb(text: str) -> bool:
    lines = ref_lines(text)
    if not lines:
        return False
    ends = set(SENTENCE_ENDS) | set("'\"”’")
    if sum(1 for x in lines if x[-1] in ends) / len(lines) < 0.12:
        return False
    _, chars = ref_dup(lines)
    if chars / sum(len(x) for x in lines) > 0.1:
        return False
    if sum(1 for x in lines if len(x) <= 30) / len(lines) > 0.67:
        return False
    words = len(text.split())
    return not (words and text.count("\n") / words > 0.3)


REFERENCES = {
    "gopher_quality": ref_gopher_quality,
    "gopher_repetition": ref_gopher_repetition,
    "c4": ref_c4,
    "fineweb_quality": ref_fineweb,
}


# -- datatrove's filters (optional: the `bench` extra) -----------------------------------------
def datatrove_filters() -> dict | None:
    """step name -> datatrove filter(text) -> None (kept) or its reason; None when datatrove is
    not installed. Its word tokenizer is replaced by whitespace words (see the docstring)."""
    try:
        from datatrove.data import Document
        from datatrove.pipeline.filters import (
            C4QualityFilter,
            FineWebQualityFilter,
            GopherQualityFilter,
            GopherRepetitionFilter,
        )
        from datatrove.utils import word_tokenizers
    except ImportError:
        return None

    class SplitWords(word_tokenizers.WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text[a:b] for a, b in self.span_tokenize(text)]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            ends = [m.end() for m in re.finditer(r"[.!?]+(?=\s|$)", text)]
            if not ends or ends[-1] < len(text.rstrip()):
                ends.append(len(text))
            return list(zip([0, *ends[:-1]], ends, strict=True))

    split = SplitWords()
    word_tokenizers.load_word_tokenizer = lambda language=None: split
    filters = {
        "gopher_quality": GopherQualityFilter(),
        "gopher_repetition": GopherRepetitionFilter(),
        "c4": C4QualityFilter(remove_citations=False, filter_no_terminal_punct=False,
                              min_words_per_line=-1, max_word_length=-1,
                              filter_javascript=False, filter_policy=False),  # fmt: skip
        "fineweb_quality": FineWebQualityFilter(char_duplicates_ratio=0.1),
        PAPER_C4: C4QualityFilter(remove_citations=False, max_word_length=-1),
    }

    def judged(f):
        def judge(text: str) -> str | None:
            out = f.filter(Document(text=text, id="0"))
            kept = out if isinstance(out, bool) else out[0]
            return None if kept else (out[1] if isinstance(out, tuple) else "removed")

        return judge

    return {name: judged(f) for name, f in filters.items()}


def _paper_c4_row(batch: pa.Table, others: dict, figures: dict, disagree: dict) -> None:
    """`c4_lines` then `c4` (the sentences of the lines kept) against datatrove's C4 with its
    line rules: agreement and disagreements, untimed."""
    lines, page = chain.build(chain.parse([{"c4_lines": {}}, {"c4": {}}]))
    kept_lines = pa.array(lines(batch).texts, pa.string())
    why = page(batch.set_column(batch.schema.get_field_index("text"), "text", kept_lines)).why
    theirs = [others[PAPER_C4](t) for t in batch["text"].to_pylist()]
    agree = sum((w is None) == (o is None) for w, o in zip(why, theirs, strict=True)) / len(why)
    removed = sum(w is not None for w in why)
    disagree[PAPER_C4] = _disagreements(why, theirs)
    figures["steps"][PAPER_C4] = {"removed": removed, "datatrove": agree,
                                  "datatrove_disagree": disagree[PAPER_C4]}  # fmt: skip
    print(f"{PAPER_C4:<20}{'-':>9}{removed:9d}{'-':>9}{'-':>10}{agree:11.4f}"
          "  (untimed: C4's line rules, then its page rules)")  # fmt: skip


def _disagreements(why: list, theirs: list) -> dict[str, int]:
    """'step reason / datatrove reason' -> documents, where one keeps and the other removes."""
    out: Counter = Counter()
    for ours, other in zip(why, theirs, strict=True):
        if (ours is None) != (other is None):
            mine = "kept" if ours is None else ours.split("=")[0]
            out[f"{mine} / {other or 'kept'}"] += 1
    return dict(out.most_common())


def _timed(fn, repeat: int, cold: bool = True) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        if cold:
            language.forget_words()
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _warm_row(step, batch, mb: float, args, figures: dict) -> None:
    """The language step on text whose words its cache already holds."""
    step(batch)
    seconds, result = _timed(lambda: step(batch), args.repeat, cold=False)
    figures["steps"]["language (warm)"] = {"mb_s": round(mb / seconds, 2),
                                           "removed": result.removed, "changed": 0}  # fmt: skip
    print(f"{'language (warm)':<20}{mb / seconds:9.2f}{result.removed:9d}{0:9d}{'-':>10}"
          f"{'-':>11}")  # fmt: skip


def _prefix_row(full, full_why, batch, mb: float, args, figures: dict) -> None:
    """The language step reading only a prefix (opt-in `max_chars`): speed, and agreement with
    its decisions on the whole text."""
    chars = args.language_max_chars
    (prefix,) = chain.build(chain.parse(
        [{"language": {**CHAIN[0]["language"], "max_chars": chars}}]))  # fmt: skip
    seconds, result = _timed(lambda: prefix(batch), args.repeat)
    agree = sum((a is None) == (b is None) for a, b in zip(full_why, result.why, strict=True))
    agree /= len(full_why)
    name = f"language[:{chars}]"
    figures["steps"][name] = {"mb_s": round(mb / seconds, 2), "removed": result.removed,
                              "changed": 0, "agreement": agree}  # fmt: skip
    print(f"{name:<20}{mb / seconds:9.2f}{result.removed:9d}{0:9d}{agree:10.4f}{'-':>11}"
          "  (restated: agreement with the whole text)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench curate", description=__doc__.splitlines()[0]
    )
    add_corpus_args(parser)
    parser.add_argument(
        "--language-max-chars", type=int, default=2000,
        help="also time the language step reading only this many characters (0: not timed)",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    texts = corpus_texts(args.input, args.mb, args.limit_mb)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    batch = pa.table({"doc_id": [str(i) for i in range(len(texts))], "source": ["x"] * len(texts),
                      "row": list(range(len(texts))), "text": texts})  # fmt: skip
    steps = chain.build(chain.parse(CHAIN))
    rows, figures = [], {"docs": len(texts), "mb": round(mb, 2), "steps": {}}
    others = datatrove_filters()
    figures["datatrove"] = others is not None
    print(f"{len(texts)} documents, {mb:.1f} MB, best of {args.repeat}"
          f"{'' if others else '; datatrove not installed (the bench extra): no datatrove column'}")
    print(f"{'step':<20}{'MB/s':>9}{'removed':>9}{'changed':>9}{'restated':>10}{'datatrove':>11}")
    disagree = {}
    for step in steps:
        seconds, result = _timed(lambda s=step: s(batch), args.repeat)
        why = getattr(result, "why", None)
        removed = sum(w is not None for w in why) if why is not None else 0
        changed = getattr(result, "changed", 0)
        restated = other = None
        if step.name in REFERENCES:
            ref = [REFERENCES[step.name](t) for t in texts]
            restated = sum((w is None) == r for w, r in zip(why, ref, strict=True)) / len(texts)
        if others and step.name in others:
            theirs = [others[step.name](t) for t in texts]
            other = sum((w is None) == (o is None) for w, o in zip(why, theirs, strict=True))
            other /= len(texts)
            disagree[step.name] = _disagreements(why, theirs)
        figures["steps"][step.name] = {"mb_s": round(mb / seconds, 2), "removed": removed,
                                       "changed": changed, "restated": restated,
                                       "datatrove": other}  # fmt: skip
        if step.name in disagree:
            figures["steps"][step.name]["datatrove_disagree"] = disagree[step.name]
        rows.append(step.name)
        shown = ["-" if v is None else f"{v:.4f}" for v in (restated, other)]
        print(f"{step.name:<20}{mb / seconds:9.2f}{removed:9d}{changed:9d}{shown[0]:>10}"
              f"{shown[1]:>11}")  # fmt: skip
        if step.name == "language":
            _warm_row(step, batch, mb, args, figures)
        if step.name == "language" and args.language_max_chars:
            _prefix_row(step, why, batch, mb, args, figures)
    if others:
        _paper_c4_row(batch, others, figures, disagree)
    seconds, outcome = _timed(lambda: chain.apply(steps, batch), args.repeat)
    figures["chain"] = {"mb_s": round(mb / seconds, 2), "kept": outcome.kept.num_rows,
                        "removed_by_rule": dict(outcome.removed_by_rule)}  # fmt: skip
    print(f"{'chain (in order)':<20}{mb / seconds:9.2f}  kept {outcome.kept.num_rows},"
          f" removed {dict(outcome.removed_by_rule)}")
    for name, counts in disagree.items():  # step's reason / datatrove's, where they differ
        shown = ", ".join(f"{k}: {v}" for k, v in list(counts.items())[:6]) or "none"
        print(f"disagree {name}: {shown}")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
