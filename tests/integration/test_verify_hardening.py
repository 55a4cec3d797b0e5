"""Case 6 of "nothing wrong committed": verify checks every shard entry's types and uniqueness
and the lineage against the counts, and fails cleanly on any malformed manifest; retain skips a
malformed version with a warning; the reader refuses a dtype that disagrees with the vocabulary
or with the .idx header."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, SAMPLE_CONFIG, setter

from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.formats.manifest import ManifestError
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.retention.plan import plan_retention
from pipeline.run.driver import run_pipeline
from pipeline.stream.reader import StreamReader


@pytest.fixture(scope="module")
def committed(ray_local, tmp_path_factory):
    """A committed dataset with removals and quarantined records (its lineage is not empty)."""
    root = tmp_path_factory.mktemp("verify")
    data = root / "in"
    data.mkdir()
    rows = [json.dumps({"id": i, "text": f"document {i % 40} " * 30}) for i in range(60)]
    rows.append('{"id": "broken", "text": ')
    (data / "a.jsonl").write_text("\n".join(rows) + "\n")
    cfg = load_config(
        SAMPLE_CONFIG,
        input_uri=str(data),
        output_uri=str(root / "out"),
        overrides=["ingest.max_error_rate=0.1", "pack.shard_bytes=2KiB"],
    )
    result = run_pipeline(cfg, show_progress=False)
    counts = result.manifest["counts"]
    assert counts["removed_exact"] == 20 and counts["quarantined"] == 1
    assert len(result.manifest["shards"]) >= 2
    return cfg, Path(result.version.path)


def edited(committed, tmp_path, edit) -> Path:
    """A copy of the dataset whose newest version's manifest went through `edit`."""
    _, version = committed
    copy = tmp_path / "sample"
    shutil.copytree(version.parent, copy)
    path = copy / version.name / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    return copy / version.name


def duplicate_shard(m):
    m["shards"].append(dict(m["shards"][0]))
    m["counts"]["tokens"] += m["shards"][0]["tokens"]
    m["counts"]["docs_out"] += m["shards"][0]["documents"]
    m["counts"]["docs_in"] += m["shards"][0]["documents"]


def more_removed(m):  # counts that still balance, in `counts` and in the (one) source's
    for entry in (m["counts"], *m["sources"].values()):
        entry["removed_exact"] += 1
        entry["docs_in"] += 1


def more_quarantined(m):
    for entry in (m["counts"], *m["sources"].values()):
        entry["quarantined"] += 1
        entry["docs_in"] += 1
    m["counts"]["quarantined_by_reason"]["malformed_json"] += 1


def other_input_digest(m):
    m["lineage"]["input_manifest_xxh3_128"] = "0" * 32


CASES = {
    "duplicated shard entry": (duplicate_shard, "already named by shard 0"),
    "removed count edited to balance": (more_removed, "dedup audit lists 20 exact"),
    "quarantine count edited to balance": (more_quarantined, "quarantine listing holds"),
    "input manifest digest": (other_input_digest, "does not have the digest"),
    "bin is a number": (setter("shards", 0, "bin", value=5), "is not a file name"),
    "bin is empty": (setter("shards", 0, "bin", value=""), "is not a file name"),
    "NUL in a name": (setter("shards", 0, "idx", value="shard\x00.idx"), "is not a file name"),
    "no tokenizer": (setter("tokenizer", delete=True), "tokenizer is missing"),
    "shard not an object": (setter("shards", 1, value="shard-1"), "is not an object"),
    "tokens a string": (setter("shards", 0, "tokens", value="12"), "non-negative integer"),
    "lineage missing": (setter("lineage", delete=True), "lineage must name"),
    "dtype too wide": (setter("tokenizer", "dtype", value="uint32"), "is not 'uint16'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_fails_cleanly_on_every_edit(committed, tmp_path, case):
    edit, message = CASES[case]
    version = edited(committed, tmp_path, edit)
    with pytest.raises(VerifyError, match=message):
        verify_version(Location.from_uri(str(version)))


def test_verify_cli_says_failed_without_a_traceback_and_retain_skips(committed, tmp_path):
    version = edited(committed, tmp_path, setter("shards", 0, "bin", value=5))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", str(version)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("verify FAILED: ") and "Traceback" not in proc.stderr
    cfg, _ = committed
    cfg = cfg.model_copy(update={"output": cfg.output.model_copy(update={"uri": str(tmp_path)})})
    proc = retain_child(cfg)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: retention skips version {version.name}" in proc.stderr
    assert "Traceback" not in proc.stderr
    plan = plan_retention(cfg)  # the malformed version is kept, whatever the rules
    kept = [d for d in plan.decisions if d.obj.key.startswith(version.name)]
    assert kept and all(d.action == "keep" for d in kept)


_RETAIN = """
import json, sys
from pipeline.config.loader import Config
from pipeline.retention.plan import format_plan, plan_retention
print(format_plan(plan_retention(Config.model_validate(json.loads(sys.argv[1])))))
# as `python -m pipeline retain` exits (apache/arrow#34314)
from pipeline.cli.main import exit_cleanly
exit_cleanly(0)
"""


def retain_child(cfg) -> subprocess.CompletedProcess:
    """The retention plan of `cfg` in a child process, as `retain` prints it."""
    return subprocess.run(
        [sys.executable, "-c", _RETAIN, json.dumps(cfg.model_dump(mode="json"))],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_reader_refuses_a_dtype_the_index_does_not_state(committed, tmp_path):
    _, version = committed
    vocab = json.loads((version / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    with StreamReader(str(version), seq_len=16) as reader:
        assert max(int(w.max()) for w in reader) < vocab  # as committed: every id in the vocab
    wide = edited(committed, tmp_path, setter("tokenizer", "dtype", value="uint32"))
    with pytest.raises(ManifestError, match="is not 'uint16'"):
        StreamReader(str(wide), seq_len=16)
    # a manifest consistent in itself (a vocabulary that needs int32) but not with its shards
    other = tmp_path / "other"
    other.mkdir()

    def big_vocab(m):
        m["tokenizer"].update(vocab_size=70_000, max_id=69_999, dtype="int32")

    lying = edited(committed, other, big_vocab)
    with pytest.raises(ManifestError, match="index header states uint16"):
        StreamReader(str(lying), seq_len=16)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"format": ' + "[" * 5_000 + "]" * 5_000 + "}"])
def test_a_deeply_nested_manifest_is_a_one_line_failure(committed, tmp_path, text):
    """JSON nesting deeper than Python's recursion limit is a ManifestError (verify FAILED,
    exit 1; the reader's ManifestError; retain's warning), never a RecursionError traceback."""
    cfg, version = committed
    copy = tmp_path / "sample"
    shutil.copytree(version.parent, copy)
    (copy / version.name / "manifest.json").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", str(copy / version.name)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("verify FAILED: ") and "nested too deeply" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    with pytest.raises(ManifestError, match="nested too deeply"):
        StreamReader(str(copy), seq_len=16)
    cfg = cfg.model_copy(update={"output": cfg.output.model_copy(update={"uri": str(tmp_path)})})
    proc = retain_child(cfg)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: retention skips version {version.name}" in proc.stderr
    assert "Traceback" not in proc.stderr
