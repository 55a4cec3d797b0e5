"""Curation in the read pass, end to end on a tiny input (real Ray): every document in is out,
removed under one rule with its reason, or quarantined (and `find` says which); a transform's
text is what reaches the shards; the audit, verify, find, the report and the read key all
follow the chain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from support import SAMPLE_CONFIG, TOKENIZER
from tokenizers import Tokenizer

from pipeline.cli import main as cli
from pipeline.config.loader import load_config
from pipeline.core.text import derived_id
from pipeline.formats.megatron import decode_index
from pipeline.formats.verify import verify_version
from pipeline.report.build import build_report
from pipeline.report.html import format_html
from pipeline.report.markdown import format_markdown
from pipeline.run.driver import run_pipeline

pytestmark = pytest.mark.slow

PROSE = "The river runs past the old mill and the children walk to school each day."
CHAIN = [
    {"length": {"min_words": 10, "max_words": None, "min_mean_word_length": None,
                "max_mean_word_length": None}},
    {"c4": {"min_sentences": 1}},
    {"pii": {}},
]  # fmt: skip


def write_input(folder: Path) -> dict[str, str]:
    docs = {f"good{i}": f"{PROSE} Number {i} is here." for i in range(6)}
    docs |= {"short0": "too short.", "short1": "also far too short."}
    docs["lorem"] = f"{PROSE} Lorem ipsum dolor sit amet."
    docs |= {f"mail{i}": f"{PROSE} Write to jane{i}@mail.example.org today." for i in range(2)}
    folder.mkdir(parents=True)
    rows = [json.dumps({"id": k, "text": v}) for k, v in docs.items()] + ["{broken"]
    rows += [json.dumps({"id": "blank", "text": "   "}), json.dumps({"text": 7})]
    (folder / "a.jsonl").write_text("\n".join(rows) + "\n")
    return docs


def offset_of_last_line(path: Path) -> int:
    return path.read_bytes().rstrip(b"\n").rindex(b"\n") + 1


def config(tmp_path: Path, chain: list) -> Path:
    raw = yaml.safe_load(SAMPLE_CONFIG.read_text())
    raw["input"]["uri"] = str(tmp_path / "in")
    raw["output"]["uri"] = str(tmp_path / "out")
    raw["tokenize"]["tokenizer"] = str(TOKENIZER)
    raw["split"] = {"valid_fraction": 0.0}
    raw["ingest"]["max_error_rate"] = 0.5  # the one broken record is quarantined, not fatal
    raw["curate"] = chain
    path = tmp_path / f"c{len(list(tmp_path.glob('c*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_chain_removes_rewrites_and_accounts_for_every_document(ray_local, tmp_path, capsys):
    docs = write_input(tmp_path / "in")
    cfg = load_config(config(tmp_path, CHAIN))
    result = run_pipeline(cfg, show_progress=False)
    counts = result.manifest["counts"]
    assert counts["removed_filtered"] == {"length": 2, "c4": 1}
    assert counts["curated"] == {"changed": {"pii": 2}, "spans": {"pii.email": 2}}
    assert counts["docs_in"] == 14 and counts["quarantined"] == 3
    assert counts["docs_out"] + counts["removed_exact"] + counts["removed_near"] + 3 + 3 == 14
    verify_version(result.version)
    # the shards hold the rewritten text, never the address
    tok = Tokenizer.from_file(str(TOKENIZER))
    text = ""
    for shard in result.manifest["shards"]:
        idx = decode_index((result.version / shard["idx"]).read_bytes())
        ids = np.frombuffer((result.version / shard["bin"]).read_bytes(), idx.dtype)
        text += tok.decode(ids.tolist(), skip_special_tokens=False)
    assert "email@example.com" in text and "@mail.example.org" not in text
    assert "Lorem ipsum" not in text and "too short" not in text
    # find says why a document is not in the version
    assert cli.main(["find", result.version.uri, "--id", "short1"]) == 7
    out = capsys.readouterr().out
    assert "'short1' was filtered by length: words=4 < 10" in out
    assert cli.main(["find", result.version.uri, "--id", "lorem"]) == 7
    assert "'lorem' was filtered by c4: lorem_ipsum" in capsys.readouterr().out
    # ... or that it was quarantined: by its own id, or by the derived one when it has none
    assert cli.main(["find", result.version.uri, "--id", "blank"]) == 7
    assert "'blank' was quarantined: empty_text: 3 whitespace characters" in capsys.readouterr().out
    unnamed = derived_id("a.jsonl", offset_of_last_line(tmp_path / "in" / "a.jsonl"))
    assert cli.main(["find", result.version.uri, "--id", unnamed]) == 7
    assert f"{unnamed!r} was quarantined: non_string_text: text is int" in capsys.readouterr().out
    kept = set(_index_ids(result))
    assert not kept & {"short0", "short1", "lorem"} and kept < set(docs)
    # the cost report's data section lists each rule
    report = build_report(cfg)
    page, markdown = format_html(report), format_markdown(report)
    assert "| length | 2 | 14.3% | - |" in markdown and "| c4 | 1 | 7.1% | - |" in markdown
    assert "| pii | 2 rewritten | 14.3% | email 2 |" in markdown
    assert "<td class=n>2 rewritten</td>" in page and "email 2" in page


def _index_ids(result) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(Path(result.version.path) / "documents.parquet")["doc_id"].to_pylist()


def test_the_chain_decides_the_read_key(tmp_path):
    (tmp_path / "in").mkdir()
    none = load_config(config(tmp_path, []))
    chained = load_config(config(tmp_path, CHAIN))
    same = load_config(config(tmp_path, CHAIN))
    looser = [{**CHAIN[0], "length": {**CHAIN[0]["length"], "min_words": 9}}, *CHAIN[1:]]
    changed = load_config(config(tmp_path, looser))
    assert chained.read_key() == same.read_key() != none.read_key()
    assert changed.read_key() != chained.read_key()
    assert chained.token_key() != none.token_key()  # a transform changes what is tokenized
    words = tmp_path / "bad.txt"
    words.write_text("one\n")
    with_list = load_config(config(tmp_path, [{"c4": {"bad_words_file": str(words)}}]))
    key = with_list.read_key()
    words.write_text("two\n")  # same path, other content: another key
    assert load_config(config(tmp_path, [{"c4": {"bad_words_file": str(words)}}])).read_key() != key
