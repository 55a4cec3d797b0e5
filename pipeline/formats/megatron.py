"""Megatron-LM indexed dataset shards: the one place that knows the byte format.

Contract: `write_index`/`ShardWriter` write what Megatron-LM's MMIDIDX reader reads
(little-endian, the dtype code of the ids), checking that every id fits the dtype
(TokenIdOutOfRange, never a wrapped id); `decode_index` refuses a malformed .idx in one
line (ShardFormatError); `boundary_problem` finds a stray EOS or BOS inside a document.
In full: docs/formats.md, "Megatron shards: .bin and .idx".
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import BinaryIO

import numpy as np
import xxhash

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence_count, document_count
HEADER_SIZE = _HEADER.size  # 34

DTYPE_CODES = MappingProxyType(
    {
        1: np.dtype("<u1"),
        2: np.dtype("<i1"),
        3: np.dtype("<i2"),
        4: np.dtype("<i4"),
        5: np.dtype("<i8"),
        6: np.dtype("<f8"),
        7: np.dtype("<f4"),
        8: np.dtype("<u2"),
    }
)
# Keyed by kind+size ("u2") so big-endian or native-order spellings of a dtype map to one code.
_CODE_BY_KEY = {dt.str[1:]: code for code, dt in DTYPE_CODES.items()}
_INT32_MAX = np.iinfo(np.int32).max
BLOCK_BYTES = 8 * 2**20  # see "Block checksums" above


class ShardFormatError(ValueError):
    """A shard's bytes do not follow the format (or its .bin and .idx disagree)."""


class IndexFormatError(ShardFormatError):
    """An .idx buffer is not a valid MMIDIDX version-1 index."""


def token_dtype(id_bound: int) -> np.dtype:
    """Token dtype for ids 0 .. id_bound - 1 (id_bound: the tokenizer's largest id + 1):
    little-endian uint16 when id_bound < 65,500, else int32."""
    if id_bound <= 0:
        raise ValueError(f"id_bound must be positive, got {id_bound}")
    return DTYPE_CODES[8] if id_bound < 65500 else DTYPE_CODES[4]


class TokenIdOutOfRange(ValueError):
    """A token id that the shard's dtype cannot hold: writing it would wrap it to another id."""


def check_ids_fit(tokens: np.ndarray, dtype: np.dtype | type | str) -> None:
    """TokenIdOutOfRange (naming the id and the dtype) when any of `tokens` (any integer dtype)
    falls outside `dtype`'s range; one min and one max over the array."""
    if not tokens.size:
        return
    info = np.iinfo(np.dtype(dtype))
    high = int(tokens.max())
    low = 0 if tokens.dtype.kind == "u" else int(tokens.min())  # unsigned: no pass for the min
    if low < info.min or high > info.max:
        bad = high if high > info.max else low
        raise TokenIdOutOfRange(
            f"token id {bad} does not fit the shard dtype {np.dtype(dtype).name}"
            f" ({info.min} .. {info.max}); it would be stored as another id"
        )


def dtype_code(dtype: np.dtype | type | str) -> int:
    """The MMIDIDX code of a numpy dtype (byte order ignored); ValueError if it has none."""
    dt = np.dtype(dtype)
    code = _CODE_BY_KEY.get(dt.str[1:])
    if code is None:
        raise ValueError(f"dtype {dt} has no Megatron dtype code; allowed: {list(_CODE_BY_KEY)}")
    return code


def encode_index(sequence_lengths: np.ndarray, dtype: np.dtype | type | str) -> bytes:
    """The complete .idx for documents of ``sequence_lengths`` tokens each, one sequence each."""
    code = dtype_code(dtype)
    lengths = np.asarray(sequence_lengths)
    if lengths.ndim != 1 or (lengths.size and lengths.dtype.kind not in "iu"):
        raise ValueError(f"sequence_lengths must be a 1-D integer array, got {lengths.dtype}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > _INT32_MAX):
        raise ValueError("sequence lengths must lie in [0, 2**31 - 1] (stored as int32)")
    count = lengths.size
    itemsize = DTYPE_CODES[code].itemsize
    pointers = np.zeros(count, dtype="<i8")
    np.cumsum(lengths[:-1].astype("<i8") * itemsize, out=pointers[1:])
    return b"".join(
        (
            _HEADER.pack(MAGIC, VERSION, code, count, count + 1),
            lengths.astype("<i4").tobytes(),
            pointers.tobytes(),
            np.arange(count + 1, dtype="<i8").tobytes(),
        )
    )


@dataclass(frozen=True)
class IndexInfo:
    """A decoded .idx; the arrays are read-only views into the decoded buffer."""

    dtype: np.dtype
    lengths: np.ndarray  # int32, tokens per sequence
    pointers: np.ndarray  # int64, byte offset of each sequence in .bin
    doc_indices: np.ndarray  # int64, document_count entries, 0 .. sequence_count

    @property
    def sequence_count(self) -> int:
        return int(self.lengths.size)

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    @property
    def bin_size(self) -> int:
        """Exact byte size the .bin must have."""
        return self.tokens * self.dtype.itemsize


def header_fields(buf: bytes) -> tuple[np.dtype | None, int]:
    """(token dtype, sequence count) from an .idx's first HEADER_SIZE bytes; dtype None when
    the magic, version or dtype code is not this format's. For a cheap check without the rest."""
    if len(buf) < HEADER_SIZE:
        return None, -1
    magic, version, code, seq_count, _ = _HEADER.unpack_from(buf)
    ok = magic == MAGIC and version == VERSION
    return (DTYPE_CODES.get(code) if ok else None), seq_count


def decode_index(buf: bytes | bytearray | memoryview) -> IndexInfo:
    """Parse and fully validate an .idx buffer (bytes, mmap, memoryview); zero-copy arrays."""
    view = memoryview(buf).cast("B")
    size = len(view)
    if size < HEADER_SIZE:
        raise IndexFormatError(f"truncated header: {size} bytes, the header alone is {HEADER_SIZE}")
    magic, version, code, seq_count, doc_count = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise IndexFormatError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise IndexFormatError(f"unsupported version {version}, expected {VERSION}")
    if code not in DTYPE_CODES:
        raise IndexFormatError(f"unknown dtype code {code}, known: {sorted(DTYPE_CODES)}")
    if doc_count < 1:
        raise IndexFormatError("document_count is 0; document_indices must at least hold [0]")
    expected = HEADER_SIZE + 12 * seq_count + 8 * doc_count
    if size != expected:
        what = "truncated" if size < expected else f"{size - expected} trailing bytes"
        raise IndexFormatError(
            f"{what}: header declares {seq_count} sequences and {doc_count} documents, "
            f"which take {expected} bytes, buffer has {size}"
        )
    lengths = np.frombuffer(view, dtype="<i4", count=seq_count, offset=HEADER_SIZE)
    pointers = np.frombuffer(view, "<i8", count=seq_count, offset=HEADER_SIZE + 4 * seq_count)
    doc_indices = np.frombuffer(view, "<i8", count=doc_count, offset=HEADER_SIZE + 12 * seq_count)
    dtype = DTYPE_CODES[code]
    _check_arrays(dtype, lengths, pointers, doc_indices)
    return IndexInfo(dtype, lengths, pointers, doc_indices)


def _check_arrays(
    dtype: np.dtype, lengths: np.ndarray, pointers: np.ndarray, doc_indices: np.ndarray
) -> None:
    negative = np.flatnonzero(lengths < 0)
    if negative.size:
        i = negative[0]
        raise IndexFormatError(f"sequence {i} has negative length {lengths[i]}")
    expected = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=expected[1:])
    wrong = np.flatnonzero(pointers != expected)
    if wrong.size:
        i = wrong[0]
        raise IndexFormatError(
            f"sequence {i} pointer is {pointers[i]}, but the lengths before it put it at "
            f"byte {expected[i]}"
        )
    if doc_indices[0] != 0:
        raise IndexFormatError(f"document_indices must start at 0, starts at {doc_indices[0]}")
    falling = np.flatnonzero(np.diff(doc_indices) < 0)
    if falling.size:
        i = falling[0] + 1
        raise IndexFormatError(
            f"document_indices decrease at entry {i}: {doc_indices[i - 1]} -> {doc_indices[i]}"
        )
    if doc_indices[-1] != lengths.size:
        raise IndexFormatError(
            f"document_indices end at {doc_indices[-1]}, must end at sequence_count {lengths.size}"
        )


def iter_documents(
    bin_buf: bytes | bytearray | memoryview, info: IndexInfo
) -> Iterator[np.ndarray]:
    """Yield each document's tokens as a read-only numpy view into ``bin_buf``."""
    yield from ShardDocuments(bin_buf, info)


class ShardDocuments(Sequence):
    """Documents of a shard by index (``docs[i]`` -> token array view), for tests and verify."""

    def __init__(self, bin_buf: bytes | bytearray | memoryview, info: IndexInfo) -> None:
        view = memoryview(bin_buf).cast("B")
        if len(view) != info.bin_size:
            raise ShardFormatError(
                f".bin has {len(view)} bytes but the index describes {info.bin_size} "
                f"({info.tokens} tokens of {info.dtype})"
            )
        self._tokens = np.frombuffer(view, dtype=info.dtype)
        self._starts = info.pointers // info.dtype.itemsize
        self._lengths = info.lengths
        # One sequence per document is what we write; map documents to their sequence ranges
        # anyway so Megatron shards with multi-sequence documents read correctly too.
        self._doc_bounds = info.doc_indices

    def __len__(self) -> int:
        return int(self._doc_bounds.size - 1)

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]
        if not -len(self) <= index < len(self):
            raise IndexError(f"document {index} out of range for {len(self)} documents")
        index %= len(self)
        first, stop = self._doc_bounds[index], self._doc_bounds[index + 1]
        if first == stop:
            return self._tokens[:0]
        last = stop - 1
        return self._tokens[self._starts[first] : self._starts[last] + self._lengths[last]]


def read_shard(bin_buf: bytes | memoryview, idx_buf: bytes | memoryview) -> ShardDocuments:
    """Decode ``idx_buf`` and give indexed access to the documents in ``bin_buf``."""
    return ShardDocuments(bin_buf, decode_index(idx_buf))


@dataclass(frozen=True)
class ShardInfo:
    """What a finished shard holds; checksums are xxh3-128 hex of the exact bytes written."""

    bin_bytes: int
    idx_bytes: int
    tokens: int
    documents: int
    bin_xxh3_128: str
    idx_xxh3_128: str
    bin_block_bytes: int
    bin_blocks_xxh3_64: list[str]


def block_digests(data: bytes | memoryview, block_bytes: int) -> list[str]:
    """xxh3-64 hex of each `block_bytes` block of `data` (the last one shorter; none if empty)."""
    view = memoryview(data).cast("B")
    return [
        xxhash.xxh3_64_hexdigest(view[i : i + block_bytes])
        for i in range(0, len(view), block_bytes)
    ]


class _BlockHasher:
    """xxh3-64 of each fixed-size block of a byte stream fed in pieces of any size."""

    def __init__(self, block_bytes: int) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block_bytes must be positive, got {block_bytes}")
        self.block_bytes, self.digests = block_bytes, []
        self._hash, self._filled = xxhash.xxh3_64(), 0

    def update(self, chunk: memoryview) -> None:
        while len(chunk):
            take = min(len(chunk), self.block_bytes - self._filled)
            self._hash.update(chunk[:take])
            self._filled += take
            chunk = chunk[take:]
            if self._filled == self.block_bytes:
                self.digests.append(self._hash.hexdigest())
                self._hash, self._filled = xxhash.xxh3_64(), 0

    def finish(self) -> list[str]:
        if self._filled:
            self.digests.append(self._hash.hexdigest())
            self._hash, self._filled = xxhash.xxh3_64(), 0
        return self.digests


class ShardWriter:
    """Streams documents into a .bin file object and writes the .idx on ``close()``.

    The caller opens (and afterwards closes) both binary file objects, e.g. with ``fsspec.open``;
    only the per-document lengths are kept in memory, never the tokens.
    """

    def __init__(
        self,
        bin_file: BinaryIO,
        idx_file: BinaryIO,
        dtype: np.dtype | type | str,
        block_bytes: int = BLOCK_BYTES,
    ):
        self._dtype = DTYPE_CODES[dtype_code(dtype)]
        self._bin_file = bin_file
        self._idx_file = idx_file
        self._bin_hash = xxhash.xxh3_128()
        self._blocks = _BlockHasher(block_bytes)
        self._lengths: list[np.ndarray] = []
        self._bin_bytes = 0
        self._closed = False
        self.index = b""  # the .idx bytes, once closed (a check without reading them back)

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def add(self, tokens_concat: np.ndarray, lengths: np.ndarray) -> None:
        """Append documents: their tokens concatenated, and each document's token count."""
        if self._closed:
            raise ValueError("ShardWriter is closed")
        tokens = np.asarray(tokens_concat)
        lengths = np.asarray(lengths)
        if tokens.ndim != 1 or lengths.ndim != 1:
            raise ValueError("tokens_concat and lengths must be 1-D arrays")
        if tokens.size and tokens.dtype.str[1:] != self._dtype.str[1:]:
            raise TypeError(f"tokens have dtype {tokens.dtype}, this shard stores {self._dtype}")
        if lengths.size and lengths.dtype.kind not in "iu":
            raise TypeError(f"lengths must be integers, got {lengths.dtype}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > _INT32_MAX):
            raise ValueError("document lengths must lie in [0, 2**31 - 1]")
        total = int(lengths.sum(dtype=np.int64))
        if total != tokens.size:
            raise ValueError(f"lengths sum to {total} but {tokens.size} tokens were given")
        data = np.ascontiguousarray(tokens, dtype=self._dtype)  # little-endian, no copy if already
        chunk = memoryview(data).cast("B")
        self._bin_file.write(chunk)
        self._bin_hash.update(chunk)
        self._blocks.update(chunk)
        self._bin_bytes += data.nbytes
        self._lengths.append(lengths.astype(np.int32))

    def close(self) -> ShardInfo:
        """Write the .idx (after all .bin bytes) and describe the shard; files stay open."""
        if self._closed:
            raise ValueError("ShardWriter is already closed")
        self._closed = True
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32)
        self._lengths = []
        idx = self.index = encode_index(lengths, self._dtype)
        self._idx_file.write(idx)
        return ShardInfo(
            bin_bytes=self._bin_bytes,
            idx_bytes=len(idx),
            tokens=int(lengths.sum(dtype=np.int64)),
            documents=int(lengths.size),
            bin_xxh3_128=self._bin_hash.hexdigest(),
            idx_xxh3_128=xxhash.xxh3_128_hexdigest(idx),
            bin_block_bytes=self._blocks.block_bytes,
            bin_blocks_xxh3_64=self._blocks.finish(),
        )
