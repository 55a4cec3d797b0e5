"""Tokenize once (pure core): texts -> one concatenated token array + per-document lengths.

The tokenizer is any Hugging Face `tokenizer.json`. Two engines encode it behind one interface
(`Encoder.encode_flat(texts) -> (uint32 ids of all texts concatenated, int64 lengths)`):

- `fastokens` (Rust; `encode_batch_flat` returns two flat buffers, no Python object per document
  or token). It refuses at load what it cannot reproduce (e.g. NFKC or BERT normalizers).
- `tokenizers` (Hugging Face): the reference. Its API returns one Python object per document, so
  collecting the ids costs a Python step per document.

Both encode the text of special and added tokens inside a document as ordinary text when
`special_as_text` is set (fastokens `split_special_tokens=True`, tokenizers
`encode_special_tokens = True`), so the EOS id appears only where `frame` appends it. `frame` adds
the optional BOS and the EOS around every document and converts to the on-disk dtype in numpy.
That dtype follows from the largest id the tokenizer can emit (`max_token_id`, over its vocabulary
and added tokens, whose ids need not be contiguous), and `frame` refuses an id it cannot hold
(TokenIdOutOfRange) rather than store it wrapped as another id.

That stops the added-token match, not the model: a SentencePiece/Unigram vocabulary holds `</s>`
and `<s>` as pieces too, and its model picks them for the literal text (`x</s>y` -> `▁ x </s> y`).
Such a document is not written: `tokenize_batches` finds the EOS/BOS id among its ids
(`special_from_text`) and hands it back to be quarantined as `special_token_text` (see
docs/tokenize.md for why it is not re-encoded some other way).

The engines are checked against each other rather than trusted: see tokens/check.py.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from pipeline.formats.megatron import check_ids_fit, token_dtype
from pipeline.tokens import pieces

ENGINES = ("fastokens", "tokenizers")


class IdsSink(Protocol):
    """Takes the engine's ids of a batch's sampled documents (tokens.check.SampleCheck)."""

    def collect(
        self, check: list[tuple[int, int]], ids: np.ndarray, lengths: np.ndarray
    ) -> None: ...


class EngineUnavailable(Exception):
    """The engine cannot be imported here or cannot load this tokenizer.json."""


@dataclass(frozen=True)
class TokenizerInfo:
    fingerprint: str  # sha256 of tokenizer.json
    vocab_size: int  # entries, added tokens included
    max_id: int  # the largest id it can emit: the dtype holds 0 .. max_id
    eos: str
    eos_id: int
    dtype: str  # numpy dtype name of the tokens on disk

    def as_dict(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "vocab_size": self.vocab_size,
            "max_id": self.max_id,
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
    return tokenizer_info(Tokenizer.from_str(raw.decode("utf-8")), raw, eos, name)


def tokenizer_info(
    tokenizer: Tokenizer, raw: bytes, eos: str, name: str = "tokenizer.json"
) -> tuple[Tokenizer, TokenizerInfo]:
    """The facts recorded about a tokenizer (parsed from `raw`) and its EOS."""
    eos_id = special_id(tokenizer, eos, name)
    fingerprint = hashlib.sha256(raw).hexdigest()
    top = _max_id(fingerprint, tokenizer)
    info = TokenizerInfo(
        fingerprint=fingerprint,
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        max_id=top,
        eos=eos,
        eos_id=eos_id,
        dtype=np.dtype(token_dtype(top + 1)).name,
    )
    return tokenizer, info


def max_token_id(tokenizer: Tokenizer) -> int:
    """The largest id `tokenizer` can emit: over its model's vocabulary and its added tokens.
    Not the entry count: a vocabulary's ids need not be contiguous (8,195 entries may reach id
    70,000)."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values(), default=0)


_MAX_IDS: dict[str, int] = {}  # fingerprint -> max_token_id: a worker's tasks share tokenizers


def _max_id(fingerprint: str, tokenizer: Tokenizer) -> int:
    if fingerprint not in _MAX_IDS:
        _MAX_IDS[fingerprint] = max_token_id(tokenizer)
    return _MAX_IDS[fingerprint]


def token_id(tokenizer: Tokenizer, token: str | None, name: str = "tokenizer.json") -> int | None:
    """The id of a configured token (BOS); None when none is configured."""
    return None if token is None else special_id(tokenizer, token, name)


def special_id(tokenizer: Tokenizer, token: str, name: str = "tokenizer.json") -> int:
    """The id of a configured EOS or BOS, which must be a *special* token of the tokenizer
    (ValueError otherwise). An ordinary vocabulary entry ("e") or a non-special added token is
    produced from text by every model, so it could not mark where documents end."""
    tid = tokenizer.token_to_id(token)
    if tid is None:
        raise ValueError(f"token {token!r} is not in tokenizer {name}")
    added = tokenizer.get_added_tokens_decoder().get(tid)
    if added is None or not added.special or added.content != token:
        kind = "a non-special added token" if added else "an ordinary vocabulary token"
        specials = sorted(
            t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special
        )
        raise ValueError(
            f"token {token!r} is {kind} of tokenizer {name}, not a special token; its"
            f" special tokens: {specials}"
        )
    return tid


def encode_batch(tokenizer: Tokenizer, texts: list[str]):
    fast = getattr(tokenizer, "encode_batch_fast", None)
    return (
        fast(texts, add_special_tokens=False)
        if fast
        else tokenizer.encode_batch(texts, add_special_tokens=False)
    )


class Encoder(Protocol):
    name: str
    cut_before: str | None  # pieces.can_cut of its tokenizer: where long texts are cut

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(uint32 ids of every text concatenated, int64 token count of each text)."""
        ...


def encode_in_pieces(encode, texts: list[str], cut_before: str | None):
    """`encode(texts)` -> (ids, lengths), with texts longer than pieces.PIECE_CHARS cut where
    the pieces give the whole's ids (tokens/pieces.py): memory follows the piece, not the
    document."""
    split = pieces.split_long(texts, cut_before)
    if split is None:
        return encode(texts)
    parts, owner = split
    ids, lengths = encode(parts)
    return ids, pieces.per_text(lengths, owner, len(texts))


class TokenizersEncoder:
    name = "tokenizers"
    CALL_CHARS = 1 << 19  # characters per encode call: its Encodings take ~170 bytes each

    def __init__(self, raw: bytes, special_as_text: bool = True) -> None:
        self.tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
        self.tokenizer.encode_special_tokens = special_as_text
        self.cut_before = pieces.can_cut(raw, special_as_text)

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return encode_in_pieces(self._encode, texts, self.cut_before)

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Encoded in calls of about CALL_CHARS characters, so that one call's Encodings, not
        the batch's, are alive at once."""
        all_ids, all_lengths, at = [], [], 0
        while at < len(texts):
            end, size = at, 0
            while end < len(texts) and (end == at or size + len(texts[end]) <= self.CALL_CHARS):
                size += len(texts[end])
                end += 1
            encodings = encode_batch(self.tokenizer, texts[at:end])
            lengths = np.fromiter((len(e) for e in encodings), np.int64, len(encodings))
            all_ids.append(
                np.fromiter(
                    itertools.chain.from_iterable(e.ids for e in encodings),
                    np.uint32,
                    int(lengths.sum()),
                )
            )
            all_lengths.append(lengths)
            del encodings
            at = end
        if not all_ids:
            return _EMPTY
        return np.concatenate(all_ids), np.concatenate(all_lengths)


class FastokensEncoder:
    name = "fastokens"

    def __init__(self, raw: bytes, special_as_text: bool = True) -> None:
        try:
            import fastokens  # optional: no wheel for every platform
        except ImportError as e:
            raise EngineUnavailable(f"fastokens cannot be imported: {e}") from None
        try:
            self.tokenizer = fastokens.Tokenizer.from_json_str(raw.decode("utf-8"))
        except Exception as e:  # noqa: BLE001 - fastokens refuses what it cannot reproduce
            raise EngineUnavailable(f"fastokens cannot load the tokenizer.json: {e}") from None
        self.split_special = special_as_text
        self.cut_before = pieces.can_cut(raw, special_as_text)

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids, lengths = encode_in_pieces(self._encode, texts, self.cut_before)
        if FAULT_MARKER:
            ids = _alter_marked(texts, ids, lengths)
        return ids, lengths

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids, offsets = self.tokenizer.encode_batch_flat(
            texts, add_special_tokens=False, split_special_tokens=self.split_special
        )
        return np.frombuffer(ids, "<u4"), np.diff(np.frombuffer(offsets, "<u8")).astype(np.int64)


# Fault injection for tests, like testing/fault_proxy.py for storage: with this variable set in the
# workers' environment, fastokens' first id of every text containing its value is changed, so a
# test can watch a disagreeing engine be caught (tests/test_tokenize_engine.py).
FAULT_ENV = "PIPELINE_FAULT_FASTOKENS_ALTER"
FAULT_MARKER = os.environ.get(FAULT_ENV, "")


def _alter_marked(texts: list[str], ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    ids = ids.copy()
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for i, text in enumerate(texts):
        if FAULT_MARKER in text and lengths[i]:
            ids[starts[i]] ^= 1
    return ids


def make_encoder(engine: str, raw: bytes, special_as_text: bool = True) -> Encoder:
    if engine == "fastokens":
        return FastokensEncoder(raw, special_as_text)
    if engine == "tokenizers":
        return TokenizersEncoder(raw, special_as_text)
    raise ValueError(f"unknown tokenizer engine {engine!r}; known: {', '.join(ENGINES)}")


@functools.lru_cache(maxsize=4)
def _cached(engine: str, digest: str, special_as_text: bool, raw: bytes) -> Encoder:
    return make_encoder(engine, raw, special_as_text)


def cached_encoder(engine: str, raw: bytes, special_as_text: bool = True) -> Encoder:
    """make_encoder, kept per process: a Ray worker runs many tasks with the same tokenizer, and
    loading one costs tens to hundreds of milliseconds. Encoders are read-only once built."""
    digest = hashlib.sha256(raw).hexdigest()
    return _cached(engine, digest, special_as_text, raw)


def frame(
    ids: np.ndarray, lengths: np.ndarray, eos_id: int, bos_id: int | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Documents as stored: [BOS] ids EOS each, concatenated in `dtype`; their int64 lengths.
    TokenIdOutOfRange when an id (EOS and BOS included) does not fit `dtype`: numpy's cast would
    store it wrapped, as another id."""
    specials = np.array([eos_id] + ([] if bos_id is None else [bos_id]), np.int64)
    check_ids_fit(specials, dtype)
    check_ids_fit(ids, dtype)
    extra = 1 if bos_id is None else 2
    out_lengths = lengths.astype(np.int64) + extra
    ends = np.cumsum(out_lengths)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=dtype)
    content = np.ones(len(out), dtype=bool)
    content[ends - 1] = False
    if bos_id is not None:
        content[ends - out_lengths] = False
        out[ends - out_lengths] = bos_id
    out[ends - 1] = eos_id
    out[content] = ids
    return out, out_lengths


@dataclass
class Batch:
    """Texts to encode, and which of them are in the task's check sample: (row in the batch,
    position in the sample)."""

    texts: list[str]
    check: list[tuple[int, int]] = field(default_factory=list)


def special_from_text(ids: np.ndarray, lengths: np.ndarray, forbidden: list[int]) -> np.ndarray:
    """Rows (documents, `lengths` tokens each) whose ids hold any of `forbidden`: the EOS/BOS
    ids, which the model made from the text itself. Ascending, each row once."""
    if not forbidden:
        return np.empty(0, np.int64)
    hit = ids == forbidden[0]  # a comparison per id: np.isin costs ~4x as much for 1-2 ids
    for token in forbidden[1:]:
        hit |= ids == token
    if not hit.any():
        return np.empty(0, np.int64)
    at = np.flatnonzero(hit)
    return np.unique(np.searchsorted(np.cumsum(lengths), at, side="right")).astype(np.int64)


@dataclass
class Framed:
    """One batch as written: its documents framed (`tokens`, `lengths`), less those in `special`
    (row in the batch -> the engine's ids of that document), which are not written."""

    tokens: np.ndarray
    lengths: np.ndarray
    special: dict[int, np.ndarray] = field(default_factory=dict)


def tokenize_batches(
    encoder: Encoder,
    batches: Iterable[Batch],
    eos_id: int,
    bos_id: int | None,
    dtype: np.dtype,
    sample: IdsSink | None = None,
    forbid_in_text: bool = True,
) -> Iterator[Framed]:
    """Frame each batch's documents, in order, two batches at a time.

    The engines release the GIL while they encode, so one batch's framing overlaps the next
    one's encoding instead of adding to it. At most three batches are held at once. With a
    `sample` (tokens.check.SampleCheck, already re-encoding its documents with the reference on
    its own thread), each batch hands it the engine's ids of its `check` documents; the caller
    compares (`sample.finish()`) before committing. With `forbid_in_text` (special tokens'
    text is text), a document whose ids hold the EOS or BOS id is left out (`Framed.special`).
    """
    forbidden = [eos_id] + ([bos_id] if bos_id is not None else [])

    def one(batch: Batch) -> Framed:
        ids, lengths = encoder.encode_flat(batch.texts) if batch.texts else _EMPTY
        if sample is not None:
            sample.collect(batch.check, ids, lengths)
        special = special_from_text(ids, lengths, forbidden) if forbid_in_text else _NONE
        found: dict[int, np.ndarray] = {}
        if len(special):
            ends = np.cumsum(lengths)
            keep = np.ones(len(ids), dtype=bool)
            for row in special.tolist():
                start, end = int(ends[row] - lengths[row]), int(ends[row])
                found[row] = ids[start:end].copy()
                keep[start:end] = False
            ids, lengths = ids[keep], np.delete(lengths, special)
        return Framed(*frame(ids, lengths, eos_id, bos_id, dtype), found)

    pool = threads("tokenize", 2)
    pending: deque = deque()
    try:
        for batch in batches:
            pending.append(pool.submit(one, batch))
            if len(pending) > 2:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:  # on an error (or an abandoned generator) no batch is left running
        for future in pending:
            future.cancel()
        for future in pending:
            if not future.cancelled():
                future.exception()


_THREADS: dict[str, ThreadPoolExecutor] = {}
_THREADS_LOCK = threading.Lock()


def task_threads() -> int | None:
    """How many threads a task may keep busy: PIPELINE_TASK_THREADS (run/ray_env.py WORKER_ENV
    sets 1 for every Ray task, which reserves one CPU); None (no bound) where it is unset."""
    value = os.environ.get("PIPELINE_TASK_THREADS", "")
    return max(1, int(value)) if value.strip() else None


def threads(name: str, workers: int) -> ThreadPoolExecutor:
    """A thread pool kept for the life of the process (a Ray worker runs many tokenize tasks one
    after another), of at most task_threads() workers. Not a new pool per task: fastokens keeps
    per-thread state that a fresh thread builds again, measured at ~30 % more CPU for a 64 MB
    unit encoded on new threads than on warm ones."""
    with _THREADS_LOCK:
        pool = _THREADS.get(name)
        if pool is None:
            workers = min(workers, task_threads() or workers)
            pool = _THREADS[name] = ThreadPoolExecutor(workers, thread_name_prefix=name)
        return pool


_EMPTY = (np.empty(0, np.uint32), np.empty(0, np.int64))
_NONE = np.empty(0, np.int64)
