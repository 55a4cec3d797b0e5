"""`curate-preview` on the shipped sample (no Ray): per step what it removes, with reasons,
and nothing written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from support import REPO

from pipeline.cli import main as cli


def test_preview_counts_each_step_and_writes_nothing(tmp_path: Path, capsys) -> None:
    config = tmp_path / "curate.yaml"
    text = (REPO / "configs" / "curate-web.yaml").read_text()
    config.write_text(text.replace("../sample", str(REPO / "sample")).replace(
        "../out", str(tmp_path / "out")).replace("tokenizer.json",
        str(REPO / "configs" / "tokenizer.json")))  # fmt: skip
    assert cli.main(["curate-preview", "--config", str(config), "--sample", "200"]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "out").exists()
    block = out.split("source web-curated:")[1]
    read = int(re.search(r"documents\s+([\d,]+) read", block).group(1).replace(",", ""))
    assert read == 200
    removed = [int(n) for n in re.findall(r"filter: removes (\d+) of", block)]
    kept = int(re.search(r"kept\s+(\d+)", block).group(1))
    assert kept + sum(removed) == read  # every document counted once
    assert re.search(r"language\s+filter: removes \d+ of 200", block)
    assert "pii                transform:" in block
    assert re.search(r": (language=|language_score=|dup_\w+=|alpha_words=|sentences=)", out)


def test_preview_refuses_a_bad_chain_in_one_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "bad.yaml"
    shutil.copy(REPO / "configs" / "tokenizer.json", tmp_path / "tokenizer.json")
    config.write_text(f"""name: x
input: {{uri: {REPO / 'sample'}}}
output: {{uri: {tmp_path / 'out'}}}
tokenize: {{tokenizer: tokenizer.json}}
curate: [{{gopher_quality: {{min_words: many}}}}]
""")
    assert cli.main(["curate-preview", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "curate" in err[0] and "gopher_quality: min_words" in err[0]


def test_the_shipped_chain_takes_input_and_output(tmp_path: Path, capsys) -> None:
    """configs/curate-web.yaml is one `input:`, so --input/--output point it at other data."""
    data = tmp_path / "crawl"
    data.mkdir()
    (data / "pages.jsonl").write_text(
        '{"id": "p1", "text": "The quick brown fox jumps over the lazy dog and runs away."}\n'
    )
    out = tmp_path / "out"
    argv = ["curate-preview", "--config", str(REPO / "configs" / "curate-web.yaml")]
    assert cli.main([*argv, "--input", str(data), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"documents\s+1 read", printed)
    assert not out.exists()
