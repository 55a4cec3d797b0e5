"""Tokenizer engines: fastokens gives tokenizers' bytes or is not used; special-token text is
text; EOS only at document ends (checked by verify); optional BOS. Real runs on a real Ray."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import ray
import xxhash
from support import (
    REPO,
    SAMPLE_CONFIG,
    SPARSE_BOS,
    SPARSE_EOS,
    SPARSE_IDS,
    SPARSE_WORD,
    sparse_tokenizer,
)
from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
from tokenizers.models import BPE

from pipeline.config.loader import load_config
from pipeline.core.layout import MANIFEST, RunLayout
from pipeline.core.storage import Location
from pipeline.formats.megatron import block_digests, read_shard
from pipeline.formats.verify import VerifyError, boundary_problem, verify_version
from pipeline.run.driver import run_pipeline
from pipeline.run.ray_env import shutdown_ray
from pipeline.run.results import RunError
from pipeline.run.summary import format_summary
from pipeline.run.tokenize_tasks import tokenize_docs
from pipeline.tokens import pieces
from pipeline.tokens.check import (
    EngineMismatch,
    SampleCheck,
    compare_engines,
    hard_strings,
    sample_rows,
)
from pipeline.tokens.encode import (
    FAULT_ENV,
    EngineUnavailable,
    FastokensEncoder,
    TokenizersEncoder,
    frame,
    threads,
)

SHIPPED = REPO / "configs" / "tokenizer.json"
MARKER = "zqxFAULTMARKERzqx"  # fastokens alters the first id of any text containing it
EXTRA_TOKENS = ["<s>", "<|im_start|>"]


@pytest.fixture(scope="module")
def ray_fault(s3_server):
    """A local Ray whose workers carry the fault variable (it only touches MARKER texts)."""
    shutdown_ray()
    os.environ[FAULT_ENV] = MARKER
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield
    finally:
        shutdown_ray()
        os.environ.pop(FAULT_ENV, None)


@pytest.fixture(scope="module")
def extra_tokenizer(tmp_path_factory) -> Path:
    """The shipped tokenizer plus two special tokens: a BOS and a chat marker."""
    tok = Tokenizer.from_file(str(SHIPPED))
    tok.add_special_tokens(EXTRA_TOKENS)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def words(rng: random.Random, n: int) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "river", "stone", "light", "north", "quiet",
             "seven", "forest", "window", "paper", "signal", "orange", "market", "cloud"]
    return " ".join(rng.choice(vocab) + str(rng.randrange(1000)) for _ in range(n))


def write_corpus(folder: Path, texts: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"d{i:05d}", "text": text}) + "\n")
    return folder


def config(tmp: Path, name: str, input_dir: Path | None = None, *sets: str):
    """The sample config (optionally on another input), output under tmp/name; quiet runs."""
    return load_config(
        SAMPLE_CONFIG,
        input_uri=str(input_dir) if input_dir else None,
        output_uri=str(tmp / name),
        overrides=list(sets),
    )


def shards(result) -> list[bytes]:
    m = result.manifest
    return [(result.version / s[k]).read_bytes() for s in m["shards"] for k in ("bin", "idx")]


def documents(result) -> list[np.ndarray]:
    out = []
    for s in result.manifest["shards"]:
        out += read_shard(
            (result.version / s["bin"]).read_bytes(), (result.version / s["idx"]).read_bytes()
        )
    return out


# -- pure cores ------------------------------------------------------------------------------
def test_frame_inserts_bos_and_eos_vectorised():
    ids = np.array([5, 6, 7, 8, 9], np.uint32)
    lengths = np.array([2, 0, 3], np.int64)
    out, lens = frame(ids, lengths, 0, None, np.dtype("uint16"))
    assert out.tolist() == [5, 6, 0, 0, 7, 8, 9, 0] and lens.tolist() == [3, 1, 4]
    out, lens = frame(ids, lengths, 0, 1, np.dtype("uint32"))
    assert out.tolist() == [1, 5, 6, 0, 1, 0, 1, 7, 8, 9, 0] and lens.tolist() == [4, 2, 5]
    assert out.dtype == np.uint32


def test_engines_agree_on_hard_strings_and_mismatch_names_document(extra_tokenizer):
    raw = extra_tokenizer.read_bytes()
    ref, fast = TokenizersEncoder(raw), FastokensEncoder(raw)
    named = hard_strings(["<|endoftext|>", *EXTRA_TOKENS])
    texts, names = [t for _, t in named], [n for n, _ in named]
    assert compare_engines(ref, fast, texts, names) is None
    ids, lengths = fast.encode_flat(texts)
    assert int(lengths.sum()) > 10000  # the long runs were really encoded
    eos_id = ref.tokenizer.token_to_id("<|endoftext|>")
    assert eos_id not in ids  # special-token text was encoded as text
    altered = ids.copy()
    row = names.index("code")
    altered[int(lengths[:row].sum()) + 3] ^= 1

    def check(found: np.ndarray) -> int:
        sample = SampleCheck(ref, fast.name, [texts[0], texts[row]], ["doc-cjk", "doc-code"])
        sample.collect([(0, 0), (row, 1)], found, lengths)
        return sample.finish()

    with pytest.raises(EngineMismatch, match="'doc-code' differs at token 3"):
        check(altered)
    check(ids)


def test_sample_check_overlapped_names_first_differing_document(extra_tokenizer):
    """The task's check: the reference encodes the sample on its own thread while the engine's
    batches go by; finish() compares and names the document."""
    raw = extra_tokenizer.read_bytes()
    ref, fast = TokenizersEncoder(raw), FastokensEncoder(raw)
    named = hard_strings(["<|endoftext|>", *EXTRA_TOKENS])
    texts = [t for _, t in named]
    rows = [0, 3, len(texts) - 1]  # a sample spread over two batches
    names = [f"doc-{r}" for r in rows]
    half = len(texts) // 2

    def run(alter_row: int | None) -> int:
        sample = SampleCheck(ref, fast.name, [texts[r] for r in rows], names)
        for lo, hi in ((0, half), (half, len(texts))):
            ids, lengths = fast.encode_flat(texts[lo:hi])
            if alter_row is not None and lo <= alter_row < hi:
                ids = ids.copy()
                ids[int(lengths[: alter_row - lo].sum()) + 1] ^= 1
            sample.collect(
                [(r - lo, at) for at, r in enumerate(rows) if lo <= r < hi], ids, lengths
            )
        return sample.finish()

    assert run(None) == 3
    with pytest.raises(EngineMismatch, match=f"'doc-{len(texts) - 1}' differs at token 1"):
        run(len(texts) - 1)
    unfinished = SampleCheck(ref, fast.name, [texts[0]], ["doc-0"])
    with pytest.raises(RuntimeError, match="never encoded"):
        unfinished.finish()


def test_sample_rows_by_key_hash():
    keys = np.array([xxhash.xxh3_64_intdigest(f"d{i}".encode()) for i in range(20000)], np.uint64)
    rows = sample_rows(keys, 0.01)
    assert 120 < len(rows) < 280 and np.array_equal(rows, sample_rows(keys, 0.01))
    assert len(sample_rows(keys, 1.0)) == len(keys)
    assert sample_rows(keys[:3], 1e-9).tolist() in ([0], [0, 1], [0, 1, 2], [1], [2])
    assert len(sample_rows(keys, 0.0)) == 0


def test_sample_rows_held_to_a_byte_budget_lowest_keys_first():
    keys = np.array([xxhash.xxh3_64_intdigest(f"d{i}".encode()) for i in range(20000)], np.uint64)
    sizes = np.array([1000 + (i * 7919) % 30000 for i in range(20000)], np.int64)
    candidates = sample_rows(keys, 0.05)
    rows = sample_rows(keys, 0.05, sizes, 32 * 1024)
    assert 1 < len(rows) < len(candidates) and set(rows) <= set(candidates)
    assert sizes[rows].sum() <= 32 * 1024 and np.all(np.diff(rows) > 0)
    low = keys % np.uint64(1 << 20)
    first = candidates[np.argmin(low[candidates])]  # the lowest key is taken when it fits
    assert first in rows or sizes[first] > 32 * 1024
    assert np.array_equal(rows, sample_rows(keys, 0.05, sizes, 32 * 1024))  # deterministic
    assert np.array_equal(sample_rows(keys, 0.05, sizes, 10**12), candidates)  # no cap
    tiny = sample_rows(keys, 0.05, sizes, 10)  # nothing fits: the shortest candidate
    assert tiny.tolist() == [int(candidates[np.argmin(sizes[candidates])])]
    assert len(sample_rows(keys, 0.05, sizes, 0)) == 0


def test_one_thread_task_checks_inline(extra_tokenizer, monkeypatch):
    """PIPELINE_TASK_THREADS=1 (a Ray task's WORKER_ENV): the reference runs in finish(), on the
    task's own thread, and a difference is still caught; pools hold one worker."""
    monkeypatch.setenv("PIPELINE_TASK_THREADS", "1")
    assert threads("one-thread-test", 2)._max_workers == 1
    raw = extra_tokenizer.read_bytes()
    ref, fast = TokenizersEncoder(raw), FastokensEncoder(raw)
    texts = [t for _, t in hard_strings(["<|endoftext|>"])][:4]
    ids, lengths = fast.encode_flat(texts)
    sample = SampleCheck(ref, fast.name, texts[1:2], ["doc-1"])
    assert sample._reference is None  # nothing started beside the engine
    altered = ids.copy()
    altered[int(lengths[0]) + 2] ^= 1
    sample.collect([(1, 0)], altered, lengths)
    with pytest.raises(EngineMismatch, match="'doc-1' differs at token 2"):
        sample.finish()


def test_sample_check_of_a_leading_piece_compares_the_first_ids(extra_tokenizer):
    """A document checked on its leading piece: the engine's first ids against the reference's
    ids of the piece; a difference inside the piece is caught, a shorter encoding too."""
    raw = extra_tokenizer.read_bytes()
    ref, fast = TokenizersEncoder(raw), FastokensEncoder(raw)
    text = words(random.Random(7), 20_000)
    lead = pieces.leading_piece(text, ref.cut_before, 4096)
    assert len(lead) < len(text)
    ids, lengths = fast.encode_flat([text])

    def check(found: np.ndarray) -> int:
        sample = SampleCheck(ref, fast.name, [lead], ["doc-long"], leading=[True])
        sample.collect([(0, 0)], found, np.array([len(found)], np.int64))
        return sample.finish()

    assert check(ids) == 1
    altered = ids.copy()
    altered[5] ^= 1
    with pytest.raises(EngineMismatch, match="'doc-long' differs at token 5"):
        check(altered)
    with pytest.raises(EngineMismatch, match="'doc-long' differs at token 9: fastokens end"):
        check(ids[:9])


def test_long_documents_only_unit_checks_a_leading_piece_within_the_budget(
    tmp_path, monkeypatch
):
    """A unit whose documents are all over tokenize.verify_bytes: the one it checks is re-encoded
    by tokenizers on its leading piece only, not whole (tokenizers is ~100x slower per byte)."""
    rng = random.Random(3)
    texts = [words(rng, 60_000) for _ in range(2)]  # ~700 KB each
    docs = pa.table(
        {
            "doc_id": [f"long-{i}" for i in range(2)],
            "source": ["s"] * 2,
            "row": pa.array([0, 1], pa.int64()),
            "text": texts,
        }
    )
    seen: list[int] = []
    encode_flat = TokenizersEncoder.encode_flat

    def spied(self, batch):
        seen.extend(len(t) for t in batch)
        return encode_flat(self, batch)

    monkeypatch.setattr(TokenizersEncoder, "encode_flat", spied)
    cfg = config(tmp_path, "out", None, "tokenize.verify_fraction=0.001")
    layout = RunLayout(Location.from_uri(str(tmp_path / "work")), "r", "read", "tok")
    made = tokenize_docs(layout, "u0", docs, cfg, SHIPPED.read_bytes(), "fastokens")
    assert made.checked == 1 and made.docs == 2
    budget = int(cfg.tokenize.verify_bytes)
    assert len(seen) == 1 and budget // 2 <= seen[0] <= budget


def test_boundary_problem_finds_stray_eos_and_missing_bos():
    tokens = np.array([1, 5, 0, 1, 6, 7, 0], np.uint16)
    lengths = np.array([3, 4], np.int64)
    assert boundary_problem(tokens, lengths, 0, 1) is None
    assert boundary_problem(tokens, lengths, 0, None) is None
    planted = tokens.copy()
    planted[4] = 0
    assert "inside document 1 (token 1)" in boundary_problem(planted, lengths, 0, 1)
    assert "does not start with BOS" in boundary_problem(tokens, lengths, 0, 5)
    assert "does not end with EOS" in boundary_problem(tokens[:-1], np.array([3, 3]), 0, None)


# -- real runs -------------------------------------------------------------------------------
def test_sample_shards_identical_whichever_engine(ray_fault, tmp_path):
    fast = run_pipeline(config(tmp_path, "fast", None, "tokenize.engine=fastokens"), False)
    slow = run_pipeline(config(tmp_path, "slow", None, "tokenize.engine=tokenizers"), False)
    assert fast.manifest["tokenizer"]["engine"] == "fastokens"
    assert fast.manifest["tokenizer"]["engine_reason"] is None
    assert slow.manifest["tokenizer"]["engine"] == "tokenizers"
    assert shards(fast) == shards(slow)
    assert fast.manifest["config_hash"] == slow.manifest["config_hash"]
    verify_version(fast.version)
    assert "tokenizer engine   fastokens" in format_summary(fast)


def test_hard_string_corpus_identical_whichever_engine(ray_fault, tmp_path, extra_tokenizer):
    rng = random.Random(7)
    named = hard_strings(["<|endoftext|>", *EXTRA_TOKENS])
    texts = [f"{text} {words(rng, 3)}" for _, text in named]  # distinct: none deduplicated
    corpus = write_corpus(tmp_path / "hard", texts)
    sets = [f"tokenize.tokenizer={extra_tokenizer}", "dedup.near.enabled=false"]
    fast = run_pipeline(config(tmp_path, "fast", corpus, *sets, "tokenize.engine=fastokens"))
    slow = run_pipeline(config(tmp_path, "slow", corpus, *sets, "tokenize.engine=tokenizers"))
    assert fast.manifest["tokenizer"]["engine"] == "fastokens"
    assert fast.manifest["counts"]["docs_out"] == len(texts)
    assert shards(fast) == shards(slow)
    verify_version(fast.version)


def nfkc_tokenizer(path: Path) -> Path:
    tok = Tokenizer(BPE())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rng = random.Random(1)
    tok.train_from_iterator([words(rng, 50) for _ in range(200)], trainer=trainer)
    tok.save(str(path))
    return path


def test_tokenizer_fastokens_cannot_load_runs_with_tokenizers(ray_fault, tmp_path):
    tok = nfkc_tokenizer(tmp_path / "nfkc.json")
    with pytest.raises(EngineUnavailable, match="NFKC"):
        FastokensEncoder(tok.read_bytes())  # the premise: fastokens refuses NFKC
    result = run_pipeline(config(tmp_path, "auto", None, f"tokenize.tokenizer={tok}"), False)
    entry = result.manifest["tokenizer"]
    assert entry["engine"] == "tokenizers"
    assert "fastokens cannot load the tokenizer.json" in entry["engine_reason"]
    summary = format_summary(result)
    assert "tokenizer engine  tokenizers  (fastokens cannot load" in summary
    verify_version(result.version)
    with pytest.raises(RunError, match="tokenize.engine is fastokens but fastokens cannot load"):
        run_pipeline(
            config(
                tmp_path, "forced", None, f"tokenize.tokenizer={tok}", "tokenize.engine=fastokens"
            ),
            False,
        )
    assert not (tmp_path / "forced" / "sample").exists() or not any(
        (p / MANIFEST).exists() for p in (tmp_path / "forced" / "sample").iterdir()
    )


@pytest.mark.parametrize("where", ["first", "last"])
def test_disagreeing_engine_is_caught_and_nothing_wrong_committed(ray_fault, tmp_path, where):
    """The marked document is first or last of the unit: the probe (hard strings only, before
    anything is read) passes, and the read task's sampled check, at verify_fraction 1, sees it
    wherever it is; the read stage is rerun with tokenizers."""
    rng = random.Random(3)
    filler = [words(rng, 200) for _ in range(400)]  # ~600 KB
    marked = f"Some prose with {MARKER} inside it. " + words(rng, 20)
    texts = [marked, *filler] if where == "first" else [*filler, marked]
    corpus = write_corpus(tmp_path / "in", texts)
    sets = [
        "ingest.unit_bytes=64MiB",
        "tokenize.verify_fraction=1.0",
        "tokenize.verify_bytes=64MiB",  # the whole unit: the marked document is checked
        "dedup.near.enabled=false",
    ]
    result = run_pipeline(config(tmp_path, "auto", corpus, *sets), False)
    reference = run_pipeline(
        config(tmp_path, "ref", corpus, *sets, "tokenize.engine=tokenizers"), False
    )
    marked_id = "d00000" if where == "first" else "d00400"
    entry = result.manifest["tokenizer"]
    assert entry["engine"] == "tokenizers"
    assert "disagreed with tokenizers in 1 task(s)" in entry["engine_reason"]
    assert f"document '{marked_id}' differs at token 0" in entry["engine_reason"]
    assert "rerun with tokenizers" in entry["engine_reason"]
    assert shards(result) == shards(reference)  # the altered id never reached a shard
    assert "tokenizer engine  tokenizers" in format_summary(result)
    verify_version(result.version)


def test_special_token_text_is_text_and_verify_catches_planted_eos(
    ray_fault, tmp_path, extra_tokenizer
):
    rng = random.Random(5)
    texts = [words(rng, 30) for _ in range(40)]
    for i in range(0, 40, 4):
        texts[i] += " then <|endoftext|> and <|im_start|>user hi <s>" + words(rng, 5)
    corpus = write_corpus(tmp_path / "in", texts)
    base = [f"tokenize.tokenizer={extra_tokenizer}", "dedup.near.enabled=false"]
    eos_id = Tokenizer.from_file(str(extra_tokenizer)).token_to_id("<|endoftext|>")
    im_id = Tokenizer.from_file(str(extra_tokenizer)).token_to_id("<|im_start|>")

    result = run_pipeline(config(tmp_path, "text", corpus, *base), False)
    docs = documents(result)
    assert len(docs) == result.manifest["counts"]["docs_out"] == 40
    flat = np.concatenate(docs)
    assert int((flat == eos_id).sum()) == len(docs)  # EOS count == documents
    assert all(d[-1] == eos_id for d in docs) and im_id not in flat
    assert result.manifest["tokenizer"]["special_tokens_in_text"] == "text"
    verify_version(result.version)

    # the old behaviour, still available: the texts' own special tokens become their ids
    special = run_pipeline(
        config(tmp_path, "special", corpus, *base, "tokenize.special_tokens_in_text=special"),
        False,
    )
    flat = np.concatenate(documents(special))
    assert int((flat == eos_id).sum()) == 40 + 10 and im_id in flat
    verify_version(special.version)  # not checked in that mode

    # plant an EOS id mid-document, with checksums that agree (a writer's bug, not damage)
    version, manifest = result.version, result.manifest
    shard = manifest["shards"][0]
    bin_path = Path(version.uri) / shard["bin"]
    tokens = np.fromfile(bin_path, dtype=manifest["tokenizer"]["dtype"])
    first_len = len(read_shard(tokens.tobytes(), (version / shard["idx"]).read_bytes())[0])
    tokens[first_len + 2] = eos_id
    bin_path.write_bytes(tokens.tobytes())
    shard["bin_xxh3_128"] = xxhash.xxh3_128_hexdigest(tokens.tobytes())
    shard["bin_blocks_xxh3_64"] = block_digests(tokens.tobytes(), shard["bin_block_bytes"])
    (Path(version.uri) / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match=f"EOS id {eos_id} inside document 1 \\(token 2\\)"):
        verify_version(version)

    # deleting the field does not switch the check off
    del manifest["tokenizer"]["special_tokens_in_text"]
    (Path(version.uri) / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match="tokenizer.special_tokens_in_text is missing"):
        verify_version(version)

    # a version written before this check existed still verifies: format 1, no block
    # checksums, and none of the fields that came with special-token handling
    manifest["format"] = "pipeline.dataset/1"
    for entry in manifest["shards"] + manifest["splits"]["valid"]:
        del entry["bin_block_bytes"], entry["bin_blocks_xxh3_64"]
    for key in ("bos", "bos_id", "engine", "engine_reason"):
        manifest["tokenizer"].pop(key, None)
    del manifest["config"]["tokenize"]["special_tokens_in_text"]
    (Path(version.uri) / MANIFEST).write_text(json.dumps(manifest))
    verify_version(version)


def test_bos_prepended_and_recorded(ray_fault, tmp_path, extra_tokenizer):
    rng = random.Random(9)
    corpus = write_corpus(tmp_path / "in", [words(rng, 20) for _ in range(12)])
    sets = [f"tokenize.tokenizer={extra_tokenizer}", "tokenize.bos=<s>", "dedup.near.enabled=false"]
    result = run_pipeline(config(tmp_path, "bos", corpus, *sets), False)
    bos_id = Tokenizer.from_file(str(extra_tokenizer)).token_to_id("<s>")
    entry = result.manifest["tokenizer"]
    assert entry["bos"] == "<s>" and entry["bos_id"] == bos_id
    docs = documents(result)
    assert len(docs) == 12
    assert all(d[0] == bos_id and d[-1] == entry["eos_id"] for d in docs)
    verify_version(result.version)


def test_sparse_ids_are_stored_as_they_are(ray_fault, tmp_path):
    """8,192 entries, and EOS 65,537, a word 66,000 and BOS 70,000: the shards are int32
    (Megatron code 4) and hold every id exactly (uint16 would store 65,537 as 1). A BOS planted
    mid-document with agreeing checksums fails verify."""
    tok = sparse_tokenizer(tmp_path)
    rng = random.Random(11)
    texts = [f"{words(rng, 8)} {SPARSE_WORD} {words(rng, 4)}" for _ in range(6)]
    corpus = write_corpus(tmp_path / "in", texts)
    sets = [f"tokenize.tokenizer={tok}", f"tokenize.eos={SPARSE_EOS}",
            f"tokenize.bos={SPARSE_BOS}", "dedup.near.enabled=false"]  # fmt: skip
    result = run_pipeline(config(tmp_path, "sparse", corpus, *sets), False)
    entry = result.manifest["tokenizer"]
    assert (entry["dtype"], entry["max_id"]) == ("int32", SPARSE_IDS[SPARSE_BOS])
    assert (entry["eos_id"], entry["bos_id"]) == (SPARSE_IDS[SPARSE_EOS], SPARSE_IDS[SPARSE_BOS])
    for s in result.manifest["shards"]:
        assert (result.version / s["idx"]).read_bytes()[17] == 4  # dtype code: int32
    reference = Tokenizer.from_file(str(tok))
    reference.encode_special_tokens = True
    expected = sorted(
        [SPARSE_IDS[SPARSE_BOS], *reference.encode(t, add_special_tokens=False).ids,
         SPARSE_IDS[SPARSE_EOS]]
        for t in texts
    )  # fmt: skip
    assert all(SPARSE_IDS[SPARSE_WORD] in d for d in expected)  # the premise: mid-document
    assert sorted(d.tolist() for d in documents(result)) == expected
    verify_version(result.version)

    version, manifest = result.version, result.manifest
    shard = manifest["shards"][0]
    bin_path = Path(version.uri) / shard["bin"]
    tokens = np.fromfile(bin_path, dtype=entry["dtype"])
    tokens[3] = SPARSE_IDS[SPARSE_BOS]
    bin_path.write_bytes(tokens.tobytes())
    shard["bin_xxh3_128"] = xxhash.xxh3_128_hexdigest(tokens.tobytes())
    shard["bin_blocks_xxh3_64"] = block_digests(tokens.tobytes(), shard["bin_block_bytes"])
    (Path(version.uri) / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match="BOS id 70000 inside document 0 \\(token 3\\)"):
        verify_version(version)


def test_eos_from_engine_is_quarantined_only_on_tokenizers_word(ray_fault, tmp_path):
    """fastokens (altered) makes the EOS id at the start of one document (issue 20): the
    sampled check is off, so before the token file kept it, the run committed and `verify`
    failed. A document about to be quarantined as special_token_text is re-encoded with
    tokenizers first: it disagrees, so the stage reruns with tokenizers and the document is
    kept."""
    rng = random.Random(3)
    texts = [words(rng, 40) for _ in range(800)]  # the marked document last
    texts.append(f"!{MARKER} {words(rng, 5)}")  # fastokens' first id, 1 ("!"), becomes 0 (EOS)
    corpus = write_corpus(tmp_path / "eos", texts)
    sets = ["dedup.near.enabled=false", "tokenize.verify_fraction=0", "tokenize.engine=auto"]
    result = run_pipeline(config(tmp_path, "eos", corpus, *sets), False)
    entry = result.manifest["tokenizer"]
    assert entry["engine"] == "tokenizers" and "d00800" in entry["engine_reason"]
    assert result.manifest["counts"]["docs_out"] == len(texts)
    assert result.manifest["counts"]["quarantined"] == 0
    verify_version(result.version)
