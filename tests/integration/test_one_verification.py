"""Nothing is committed that `verify` would reject (issue 20): the run checks each shard with
verify's own check_shard, EOS boundaries included, and the version with verify_manifest; a
model that makes the EOS id from text gets its document quarantined (special_token_text); a
giant document's tokenize task stays within bounded memory. Real runs on a real Ray."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import REPO, SAMPLE_CONFIG, unigram

from pipeline.bench import doc_memory
from pipeline.config.loader import load_config
from pipeline.core.layout import MANIFEST
from pipeline.core.storage import Location
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import committed_versions
from pipeline.run.driver import run_pipeline
from pipeline.run.results import RunError
from pipeline.tokens import framed


def corpus(folder: Path, texts: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"d{i:03d}", "text": text}) + "\n")
    return folder


def config(tmp: Path, inp: Path, *sets: str):
    return load_config(
        SAMPLE_CONFIG,
        input_uri=str(inp),
        output_uri=str(tmp / "out"),
        overrides=["dedup.near.enabled=false", "ingest.max_error_rate=0.5", *sets],
    )


def test_unigram_eos_from_text_is_quarantined_and_the_version_verifies(ray_local, tmp_path):
    """Case (a): before, the run committed `x</s>y` as [▁ x </s> y] and verify failed."""
    texts = [f"the quick brown fox {i} jumps over the lazy dog" for i in range(20)]
    texts += ["x</s>y marks the spot", "a <s> in the text"]
    inp = corpus(tmp_path / "in", texts)
    sets = [f"tokenize.tokenizer={unigram(tmp_path)}", "tokenize.eos=</s>", "tokenize.bos=<s>"]
    result = run_pipeline(config(tmp_path, inp, *sets), False)
    assert verify_version(result.version)["version"] == result.version.name
    counts = result.manifest["counts"]
    assert counts["quarantined_by_reason"] == {"special_token_text": 2}
    assert counts["docs_out"] == 20 and counts["docs_in"] == 22
    run = next((tmp_path / "out" / "sample" / "_work" / "runs").iterdir())
    bad = pq.read_table(run / "quarantine.parquet").to_pylist()
    assert sorted(r["reason"] for r in bad) == ["special_token_text"] * 2
    assert any("'</s>'" in r["detail"] for r in bad) and any("'<s>'" in r["detail"] for r in bad)
    # another pack of the same token files: the quarantine is reused with them
    again = run_pipeline(config(tmp_path, inp, *sets, "pack.shard_bytes=2KiB"), False)
    assert again.manifest["counts"]["quarantined_by_reason"] == {"special_token_text": 2}
    assert next(s for s in again.stages if s.name == "read+hash").reused == 1
    verify_version(again.version)


def test_a_shard_verify_would_reject_is_never_committed(ray_local, tmp_path):
    """A token file whose tokens hold a stray EOS (here: edited on disk and stored again as
    valid frames, as a wrong engine would leave it) reaches pack; before, the run committed it
    and only `verify` failed. Now the run stops with verify's own message and commits nothing.
    A byte flipped in the stored frames (a corrupt store) is caught by their checksums."""
    inp = REPO / "sample"
    first = run_pipeline(config(tmp_path, inp), False)
    eos = first.manifest["tokenizer"]["eos_id"]
    dtype = np.dtype(first.manifest["tokenizer"]["dtype"])
    tokens_dir = next((tmp_path / "out" / "sample" / "_work" / "tokens").iterdir())
    # a unit's token file with documents (unit ids, so names, follow the files' metadata: a
    # unit of only quarantined records has an empty one)
    token_file = max(sorted(tokens_dir.glob("*.bin")), key=lambda p: p.stat().st_size)
    index = pq.read_table(token_file.with_suffix(".parquet"))
    table = framed.table_of(index)
    loc = Location.from_uri(str(token_file))
    data = np.frombuffer(framed.read_range(loc, table, 0, table.raw_bytes), dtype).copy()
    data[int(index["length"][0].as_py()) // 2] = eos  # inside the first document
    # stored again as valid frames, and every index of the file given the new frame table
    with loc.atomic_writer() as out:
        writer = framed.FramedWriter(out)
        writer.write(data.view(np.uint8))
        frames = writer.close()
    for path in tokens_dir.glob(f"{token_file.stem}*.parquet"):
        if "quarantine" not in path.name:
            pq.write_table(framed.with_table(pq.read_table(path), frames), path)
    with pytest.raises(RunError, match=r"a shard fails verify: .*EOS id \d+ inside document"):
        run_pipeline(config(tmp_path, inp, "pack.shard_bytes=700KiB"), False)
    _nothing_committed_since(tmp_path, first)

    # a flipped byte in the stored frames: their checksum catches it before any shard
    raw = bytearray(token_file.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    token_file.write_bytes(bytes(raw))
    with pytest.raises(RunError, match=r"a token file is corrupt: .*nothing was committed"):
        run_pipeline(config(tmp_path, inp, "pack.shard_bytes=600KiB"), False)
    _nothing_committed_since(tmp_path, first)


def _nothing_committed_since(tmp_path, first) -> None:
    names = committed_versions(Location.from_uri(str(tmp_path / "out" / "sample")))
    assert names == [first.version.name]  # the failed run committed nothing
    versions = [p for p in (tmp_path / "out" / "sample").iterdir() if p.name[0].isdigit()]
    assert sum((v / MANIFEST).exists() for v in versions) == 1


@pytest.mark.slow  # tokenizes a giant document
def test_a_giant_document_tokenizes_in_bounded_memory():
    """Before: a 15 MB document peaked at ~2.3 GB (tokenizers) / 2.5 GB (fastokens with its
    reference check); 6 MB at about 1 GB, some 600 MB over a unit of small documents. Now the
    task's peak follows the piece size: the giant adds little over the same task without it
    (measured in the same test, so a machine's base RSS does not matter)."""
    peaks = {}
    for mb in (0.01, 6):
        with tempfile.TemporaryDirectory(prefix="doc-memory-") as work:
            doc_memory.stage_unit(work, mb)
            rss, _, out = doc_memory.peak_rss_mb(
                work, str(REPO / "configs" / "tokenizer.json"), "tokenizers", str(REPO)
            )
        assert out.startswith("201 ")
        peaks[mb] = rss
    growth = peaks[6] - peaks[0.01]
    assert growth < 300, f"a 6 MB document adds {growth:.0f} MB of peak RSS ({peaks})"
