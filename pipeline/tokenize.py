"""Tokenize once (pure core): texts -> one concatenated token array + per-document lengths.

The tokenizer is any Hugging Face `tokenizer.json`; the configured EOS token is appended to every
document so that documents stay separable once packed. Batches go through the tokenizer's own
Rust thread pool (`encode_batch_fast` when available: no offsets computed); the only Python work
per document is collecting its ids, which the API makes unavoidable.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

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


def encode_batch(tokenizer: Tokenizer, texts: list[str]):
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
    return _to_arrays(encode_batch(tokenizer, texts) if texts else [], eos_id, dtype)


def tokenize_batches(
    tokenizer: Tokenizer, batches: Iterable[list[str]], eos_id: int, dtype: np.dtype
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """tokenize_texts over a stream of batches, in order, two batches at a time.

    The tokenizer releases the GIL while it encodes, and the conversion to numpy lets it go
    between documents, so one batch's conversion overlaps the next one's encoding instead of
    adding to it. At most three batches are held at once.
    """
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending: deque = deque()
        for texts in batches:
            pending.append(pool.submit(tokenize_texts, tokenizer, texts, eos_id, dtype))
            if len(pending) > 2:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _to_arrays(encodings, eos_id: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(e) + 1 for e in encodings), dtype=np.int64, count=len(encodings))
    flat = np.empty(int(lengths.sum()), dtype=dtype)
    pos = 0
    for encoding in encodings:  # one slice assignment per document, not a Python step per token
        ids = encoding.ids
        end = pos + len(ids)
        flat[pos:end] = ids
        flat[end] = eos_id
        pos = end + 1
    return flat, lengths
