"""Tokenize once (pure core): texts -> one concatenated token array + per-document lengths.

The tokenizer is any Hugging Face `tokenizer.json`; the configured EOS token is appended to every
document so that documents stay separable once packed. Batches go through the tokenizer's own
Rust thread pool (`encode_batch_fast` when available: no offsets computed); the only Python work
per document is collecting its ids, which the API makes unavoidable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain

import numpy as np
from tokenizers import Tokenizer

from pipeline.megatron import token_dtype


@dataclass(frozen=True)
class TokenizerInfo:
    fingerprint: str  # sha256 of tokenizer.json
    vocab_size: int
    eos: str
    eos_id: int
    dtype: str  # numpy dtype name of the tokens on disk

    def as_dict(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "vocab_size": self.vocab_size,
            "eos": self.eos,
            "eos_id": self.eos_id,
            "dtype": self.dtype,
        }


def load_tokenizer(path: str, eos: str) -> tuple[Tokenizer, TokenizerInfo]:
    with open(path, "rb") as f:
        return tokenizer_from_json(f.read(), eos, path)


def tokenizer_from_json(
    raw: bytes, eos: str, name: str = "tokenizer.json"
) -> tuple[Tokenizer, TokenizerInfo]:
    tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    eos_id = tokenizer.token_to_id(eos)
    if eos_id is None:
        raise ValueError(f"EOS token {eos!r} is not in tokenizer {name}")
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    info = TokenizerInfo(
        fingerprint=hashlib.sha256(raw).hexdigest(),
        vocab_size=vocab,
        eos=eos,
        eos_id=eos_id,
        dtype=np.dtype(token_dtype(vocab)).name,
    )
    return tokenizer, info


def _encode(tokenizer: Tokenizer, texts: list[str]):
    fast = getattr(tokenizer, "encode_batch_fast", None)
    return (
        fast(texts, add_special_tokens=False)
        if fast
        else tokenizer.encode_batch(texts, add_special_tokens=False)
    )


def tokenize_texts(
    tokenizer: Tokenizer, texts: list[str], eos_id: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Return (tokens of all documents concatenated, each with EOS; int64 lengths)."""
    return _to_arrays(_encode(tokenizer, texts) if texts else [], eos_id, dtype)


def tokenize_batches(
    tokenizer: Tokenizer, batches: Iterable[list[str]], eos_id: int, dtype: np.dtype
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """tokenize_texts over a stream of batches, encoding batch i+1 while batch i is converted.

    The tokenizer releases the GIL while it encodes, so the Python-side conversion and writing of
    one batch overlap the Rust-side encoding of the next instead of adding to it.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for texts in batches:
            submitted = pool.submit(_encode, tokenizer, texts)
            if pending is not None:
                yield _to_arrays(pending.result(), eos_id, dtype)
            pending = submitted
        if pending is not None:
            yield _to_arrays(pending.result(), eos_id, dtype)


def _to_arrays(encodings, eos_id: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    if not encodings:
        return np.empty(0, dtype=dtype), np.empty(0, dtype=np.int64)
    id_lists = [e.ids for e in encodings]
    lengths = np.fromiter((len(ids) + 1 for ids in id_lists), dtype=np.int64, count=len(id_lists))
    eos = (eos_id,)
    flat = np.fromiter(
        chain.from_iterable(chain(ids, eos) for ids in id_lists),
        dtype=dtype,
        count=int(lengths.sum()),
    )
    return flat, lengths
