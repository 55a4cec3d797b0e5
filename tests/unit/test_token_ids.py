"""Ids are stored as they are: the token dtype follows the largest id a tokenizer can emit, an id
the dtype cannot hold is refused rather than wrapped, and a BOS id inside a document is caught
like an EOS id."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from support import SPARSE_BOS, SPARSE_EOS, SPARSE_IDS, TOKENIZER, sparse_tokenizer

from pipeline.formats.megatron import ShardWriter, TokenIdOutOfRange, decode_index, dtype_code
from pipeline.formats.verify import VerifyError, boundary_problem, check_document_boundaries
from pipeline.report.dry_run import plan_for_config, tokenizer_bytes_per_id
from pipeline.report.dry_run_printout import dry_run_lines
from pipeline.run.tokenize_tasks import InOrder
from pipeline.tokens.encode import frame, special_from_text, tokenizer_from_json


def test_dtype_follows_the_largest_id_not_the_entry_count(tmp_path):
    raw = sparse_tokenizer(tmp_path).read_bytes()
    _, info = tokenizer_from_json(raw, SPARSE_EOS)
    assert info.vocab_size < 65_500  # the premise: few entries, large ids
    assert info.max_id == SPARSE_IDS[SPARSE_BOS] == 70_000
    assert info.eos_id == 65_537
    assert info.dtype == "int32" and dtype_code(info.dtype) == 4
    _, dense = tokenizer_from_json(TOKENIZER.read_bytes(), "<|endoftext|>")
    assert (dense.dtype, dense.max_id, dense.vocab_size) == ("uint16", 8191, 8192)


def test_frame_refuses_an_id_its_dtype_would_wrap():
    ids = np.array([5, 65_537, 7], np.uint32)
    with pytest.raises(TokenIdOutOfRange, match="token id 65537 does not fit .* uint16"):
        frame(ids, np.array([3], np.int64), 0, None, np.dtype("uint16"))
    with pytest.raises(TokenIdOutOfRange, match="token id 70000 does not fit .* uint16"):
        frame(ids[:1], np.array([1], np.int64), 0, 70_000, np.dtype("uint16"))
    out, _ = frame(ids, np.array([3], np.int64), 65_538, 70_000, np.dtype("int32"))
    assert out.tolist() == [70_000, 5, 65_537, 7, 65_538]  # stored as they are


def test_boundary_problem_flags_a_stray_bos_only_where_the_config_puts_none():
    tokens = np.array([1, 5, 1, 6, 0, 1, 7, 0], np.uint16)  # BOS 1 at token 2 of document 0
    lengths = np.array([5, 3], np.int64)
    problem = boundary_problem(tokens, lengths, 0, 1)
    assert problem.startswith("BOS id 1 inside document 0 (token 2)")
    assert boundary_problem(tokens, lengths, 0, 1, first=7).startswith("BOS id 1 inside document 7")
    clean = np.array([1, 5, 6, 0, 1, 7, 0], np.uint16)
    assert boundary_problem(clean, np.array([4, 3], np.int64), 0, 1) is None  # BOS at starts
    assert boundary_problem(tokens[1:], np.array([4, 3]), 0, None) is None  # no BOS configured
    same = np.array([0, 5, 6, 0, 0, 7, 0], np.uint16)  # bos == eos (GPT-4o-like): EOS rules
    assert boundary_problem(same, np.array([4, 3], np.int64), 0, 0) is None


def test_written_shard_with_a_stray_bos_fails_the_shard_check():
    docs = [np.array(d, np.int32) for d in ([70_000, 5, 70_000, 65_537], [70_000, 6, 65_537])]
    bin_, idx = io.BytesIO(), io.BytesIO()
    writer = ShardWriter(bin_, idx, np.int32)
    writer.add(np.concatenate(docs), np.array([len(d) for d in docs]))
    writer.close()
    info = decode_index(idx.getvalue())
    tokens = np.frombuffer(bin_.getvalue(), info.dtype)
    assert tokens.tolist() == np.concatenate(docs).tolist()
    tokenizer = {"special_tokens_in_text": "text", "eos_id": 65_537, "bos_id": 70_000}
    with pytest.raises(VerifyError, match="BOS id 70000 inside document 0 \\(token 2\\)"):
        check_document_boundaries(info, tokens, {"bin": "train-00000.bin"}, tokenizer, "v")


def test_plan_sizes_tokens_by_the_config_tokenizers_dtype(tmp_path):
    from support import SAMPLE_CONFIG

    from pipeline.config.loader import load_config

    sparse = sparse_tokenizer(tmp_path)
    assert tokenizer_bytes_per_id(str(sparse)) == 4
    assert tokenizer_bytes_per_id(str(TOKENIZER)) == 2
    assert tokenizer_bytes_per_id(str(tmp_path / "absent.json")) == 2
    cfg = load_config(SAMPLE_CONFIG, overrides=[f"tokenize.tokenizer={sparse}"], check_paths=False)
    wide, stages = plan_for_config(cfg, 10**9)
    narrow, _ = plan_for_config(None, 10**9)
    assert wide["token_bytes"] == 2 * narrow["token_bytes"]
    assert any("of tokens at 4 B each" in line for line in dry_run_lines(wide, stages))


def test_special_from_text_names_each_document_holding_the_eos_or_the_bos_id_once():
    # documents of 3, 2, 4 and 1 tokens; EOS 9 in document 0 twice, BOS 8 in document 2
    ids = np.array([9, 1, 9, 2, 3, 4, 8, 5, 6, 7], np.uint32)
    lengths = np.array([3, 2, 4, 1], np.int64)
    assert special_from_text(ids, lengths, [9, 8]).tolist() == [0, 2]
    assert special_from_text(ids, lengths, [8]).tolist() == [2]
    assert special_from_text(ids, lengths, [7]).tolist() == [3]
    assert special_from_text(ids, lengths, [10]).tolist() == []


def test_boundary_problem_finds_a_stray_eos_after_counting_them():
    tokens = np.array([5, 0, 6, 0, 7, 0], np.uint16)  # EOS 0 at token 1 of document 0
    problem = boundary_problem(tokens, np.array([4, 2], np.int64), 0, None, first=3)
    assert problem.startswith("EOS id 0 inside document 3 (token 1)")
    assert boundary_problem(tokens, np.array([2, 2, 2], np.int64), 0, None) is None


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_texts_in_shuffle_order_are_decoded_from_the_columns_own_buffer(kind):
    texts = ["héllo", "", "wörld 🌍", "a", "mixed\\u0000nul", "z" * 300, "ß"]
    whole = pa.array(["drop me", *texts], kind).slice(1)  # a slice: its offsets start at 1
    order = pa.array([3, 0, 6, 2, 5, 1, 4], pa.int64())
    column = pa.chunked_array([whole])
    in_order = InOrder(column, order)
    want = [texts[i] for i in order.to_pylist()]
    assert [t for start in range(0, 7, 3) for t in in_order.slice(start, 3)] == want
    # columns the buffer path does not read go through a take
    two_chunks = InOrder(pa.chunked_array([whole.slice(0, 4), whole.slice(4)]), order)
    assert two_chunks.slice(0, 7) == want
    with_null = InOrder(pa.chunked_array([pa.array([*texts[:6], None], kind)]), order)
    assert with_null.slice(0, 7) == [([*texts[:6], None])[i] for i in order.to_pylist()]
