"""Long documents in pieces give the ids of the whole (tokens/pieces.py); EOS/BOS must be
special tokens; a model that makes the EOS id from text is caught (tokens/encode.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from support import SAMPLE, TOKENIZER, unigram
from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)

from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.tokens import pieces
from pipeline.tokens.check import hard_strings
from pipeline.tokens.encode import (
    Batch,
    FastokensEncoder,
    TokenizersEncoder,
    special_id,
    tokenize_batches,
)

ENGINES = (TokenizersEncoder, FastokensEncoder)
TRICKY = (
    "a  b a \n b x\n\nY 123 456 it's a dog's l'été 12345 67\nab a\tb 'll x  \n  y"
    " déjà vu  naïve Ünïcödé a b\u00a0c α β x.\ny ab,cd ef!\n\ngh 7\n8 \r\n a b"
)


def sample_text() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(SAMPLE.rglob("*"))
        if p.is_file() and p.suffix in (".jsonl", ".txt", ".md")
    )


@pytest.fixture(scope="module")
def long_text() -> str:
    return (sample_text() + TRICKY) * 2  # ~6 MB of real text


@pytest.fixture(scope="module")
def cl100k_bpe(tmp_path_factory, long_text) -> Path:
    """A byte-level BPE with the GPT-4 (cl100k) split regex, trained here on real text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pieces.CL100K_PATTERN), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([long_text[i : i + 10000] for i in range(0, 2_000_000, 10000)], trainer)
    path = tmp_path_factory.mktemp("bpe") / "cl100k.json"
    tok.save(str(path))
    return path


def whole_and_pieces(cls, raw: bytes, text: str, piece_chars: int):
    enc = cls(raw)
    cut_before = pieces.can_cut(raw, True)
    assert cut_before is not None
    whole, _ = enc._encode([text])
    parts, owner = pieces.split_long([text], cut_before, piece_chars)
    assert len(parts) > 10 and "".join(parts) == text
    ids, lengths = enc._encode(parts)
    assert pieces.per_text(lengths, owner, 1)[0] == len(whole)
    return whole, ids


@pytest.mark.parametrize("cls", ENGINES)
@pytest.mark.parametrize("piece_chars", [64, 4096, pytest.param(300_000, marks=pytest.mark.slow)])
def test_pieces_give_the_whole_documents_ids_shipped(cls, piece_chars, long_text):
    text = long_text if piece_chars > 4096 else long_text[:400_000]
    whole, ids = whole_and_pieces(cls, TOKENIZER.read_bytes(), text, piece_chars)
    assert np.array_equal(whole, ids)


@pytest.mark.parametrize("cls", ENGINES)
@pytest.mark.parametrize("piece_chars", [64, pytest.param(300_000, marks=pytest.mark.slow)])
def test_pieces_give_the_whole_documents_ids_cl100k(cls, piece_chars, long_text, cl100k_bpe):
    text = long_text if piece_chars > 4096 else long_text[:400_000]
    whole, ids = whole_and_pieces(cls, cl100k_bpe.read_bytes(), text, piece_chars)
    assert np.array_equal(whole, ids)


@pytest.mark.parametrize("cls", ENGINES)
def test_encode_flat_cuts_long_documents_only_and_keeps_ids(cls, long_text, monkeypatch):
    raw = TOKENIZER.read_bytes()
    texts = [TRICKY, long_text[:200_000], "", "short one"]
    before = cls(raw)._encode(texts)
    monkeypatch.setattr(pieces, "PIECE_CHARS", 1000)
    monkeypatch.setattr(TokenizersEncoder, "CALL_CHARS", 5000)
    after = cls(raw).encode_flat(texts)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])


def test_cut_points_are_deterministic_and_only_between_alnum_and_space():
    text = ("word " * 50 + "\n" + "漢字" * 300 + " x\ny") * 20
    cuts = pieces.cut_points(text, " \n", 100)
    assert cuts == pieces.cut_points(text, " \n", 100) and cuts == sorted(set(cuts))
    for c in cuts:
        assert text[c - 1].isascii() and text[c - 1].isalnum()
        assert text[c] in " \n" and text[c + 1].isascii() and text[c + 1].isalnum()
    assert all(text[c] == " " for c in pieces.cut_points(text, " ", 100))
    assert pieces.cut_points("漢字" * 1000, " \n", 100) == []  # no safe position: whole


def test_can_cut_only_what_is_proven(tmp_path):
    shipped = json.loads(TOKENIZER.read_bytes())
    assert pieces.can_cut(TOKENIZER.read_bytes(), True) == " \n"

    def variant(**changes) -> bytes:
        return json.dumps({**shipped, **changes}).encode()

    nfkc = {"type": "NFKC"}
    prefix = {**shipped["pre_tokenizer"], "add_prefix_space": True}
    other_regex = {
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": {"Regex": r"\p{L}+ \p{L}+|."},
                "behavior": "Isolated",
                "invert": False,
            },
            {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": False,
            },
        ],
    }
    spaced = [
        *shipped["added_tokens"],
        {**shipped["added_tokens"][0], "id": 99999, "content": "a b", "special": False},
    ]
    assert pieces.can_cut(variant(normalizer=nfkc), True) is None
    assert pieces.can_cut(variant(pre_tokenizer=prefix), True) == " "
    assert pieces.can_cut(variant(pre_tokenizer=other_regex), True) is None
    assert pieces.can_cut(variant(added_tokens=spaced), True) is None
    assert pieces.can_cut(unigram(tmp_path).read_bytes(), True) is None


def test_eos_and_bos_must_be_special_tokens(tmp_path):
    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.add_tokens(["<plain>"])
    tok.add_special_tokens(["<s>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    assert special_id(tok, "<s>") == tok.token_to_id("<s>")
    for token, kind in (("e", "ordinary vocabulary"), ("<plain>", "non-special added")):
        with pytest.raises(ValueError, match=f"{kind} token"):
            special_id(tok, token)
    corpus = tmp_path / "in"
    corpus.mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(
        f"name: x\ninput: {{uri: {corpus}}}\noutput: {{uri: {tmp_path / 'out'}}}\n"
        f"tokenize: {{tokenizer: {path}}}\n"
    )
    load_config(config, overrides=["tokenize.bos=<s>"])
    for key, token in (("eos", "e"), ("bos", "<plain>"), ("eos", "<plain>")):
        with pytest.raises(
            ConfigError,
            match=rf"key 'tokenize\.{key}': token '{token}' is"
            rf" an? .* of tokenizer {path}, not a special",
        ):
            load_config(config, overrides=[f"tokenize.{key}={token}"])


def test_a_model_that_makes_eos_from_text_is_caught(tmp_path):
    raw = unigram(tmp_path).read_bytes()
    tok = Tokenizer.from_str(raw.decode())
    eos, bos = tok.token_to_id("</s>"), tok.token_to_id("<s>")
    enc = TokenizersEncoder(raw)
    ids, _ = enc.encode_flat(["x</s>y"])
    assert eos in ids.tolist()  # the model itself picks the piece, special-as-text or not
    texts = ["the quick fox", "x</s>y", "a <s> b", "the lazy dog"]
    [framed] = tokenize_batches(enc, [Batch(texts)], eos, bos, np.dtype("uint16"))
    assert sorted(framed.special) == [1, 2]
    assert len(framed.lengths) == 2 and framed.tokens.tolist().count(eos) == 2
    [kept] = tokenize_batches(
        enc, [Batch(texts)], eos, bos, np.dtype("uint16"), forbid_in_text=False
    )
    assert kept.special == {} and len(kept.lengths) == 4


def test_probe_hard_strings_hold_sentencepiece_pieces():
    texts = dict(hard_strings([]))
    assert "x</s>y" in texts["sentencepiece-pieces"]
    assert "\u2581" in texts["sentencepiece-pieces"]


def scanned_cut_points(text: str, cut_before: str, piece_chars: int) -> list[int]:
    """cut_points' rule by a forward scan over every safe position: the last one in the second
    half of each span, else the first one after it."""
    safe = re.compile(rf"[A-Za-z0-9](?=[{re.escape(cut_before)}][A-Za-z0-9])")
    cuts, start = [], 0
    while len(text) - start > piece_chars:
        end = start + piece_chars
        found = [m.end() for m in safe.finditer(text, start + piece_chars // 2, end)]
        after = safe.search(text, end)
        found = found or ([after.end()] if after else [])
        if not found:
            break
        cuts.append(start := found[-1])
    return cuts


@pytest.mark.parametrize("piece_chars", [2, 3, 7, 100, 4096, pieces.PIECE_CHARS])
def test_cut_points_are_the_last_safe_position_of_each_span(piece_chars, long_text):
    text = long_text if piece_chars > 100 else long_text[:50_000]
    sparse = "漢字" * 3000 + " a b" + "漢字" * 3000 + "x y" * 10 + "z" * 900
    for cut_before in (" \n", " "):
        for t in (text, sparse, TRICKY):
            assert pieces.cut_points(t, cut_before, piece_chars) == scanned_cut_points(
                t, cut_before, piece_chars
            )


@pytest.mark.parametrize("cls", ENGINES)
def test_leading_piece_gives_the_first_ids_of_the_whole(cls, long_text):
    raw = TOKENIZER.read_bytes()
    enc, text = cls(raw), long_text[:100_000]
    whole, _ = enc._encode([text])
    lead = pieces.leading_piece(text, enc.cut_before, 32 * 1024)
    assert 16 * 1024 <= len(lead) <= 32 * 1024 and text.startswith(lead)
    ids, _ = enc._encode([lead])
    assert np.array_equal(ids, whole[: len(ids)])
    assert pieces.leading_piece(text, None, 1000) == text  # a tokenizer that cannot be cut
    assert pieces.leading_piece("漢字" * 1000, " \n", 100) == "漢字" * 1000  # no safe position
