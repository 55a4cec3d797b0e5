"""Shard format tests. The reference reader below is written from the published MMIDIDX layout
with ``struct`` only, so a writer bug cannot hide behind the module's own decoder."""

import io
import struct

import fsspec
import numpy as np
import pytest
import xxhash

from pipeline.formats.megatron import (
    DTYPE_CODES,
    IndexFormatError,
    ShardFormatError,
    ShardWriter,
    decode_index,
    encode_index,
    iter_documents,
    read_shard,
    token_dtype,
)

# The published code table (Megatron-LM DType enum), restated independently of the module.
PUBLISHED_CODES = {1: "u1", 2: "i1", 3: "i2", 4: "i4", 5: "i8", 6: "f8", 7: "f4", 8: "u2"}


def reference_read(idx: bytes, bin_: bytes) -> tuple[str, list[list[int]], list[int]]:
    """Parse a shard the way Megatron's _IndexReader does, with struct; returns
    (dtype, documents as token lists, pointers)."""
    assert idx[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", idx, 9)
    (code,) = struct.unpack_from("<B", idx, 17)
    seq_count, doc_count = struct.unpack_from("<QQ", idx, 18)
    assert version == 1
    offset = 34
    lengths = struct.unpack_from(f"<{seq_count}i", idx, offset)
    offset += 4 * seq_count
    pointers = struct.unpack_from(f"<{seq_count}q", idx, offset)
    offset += 8 * seq_count
    doc_indices = struct.unpack_from(f"<{doc_count}q", idx, offset)
    offset += 8 * doc_count
    assert offset == len(idx), "idx has bytes beyond the declared arrays"
    fmt = {"u2": "H", "i4": "i", "u1": "B", "i8": "q"}[PUBLISHED_CODES[code]]
    itemsize = struct.calcsize(fmt)
    assert doc_indices == tuple(range(seq_count + 1))  # one sequence per document
    docs = [
        list(struct.unpack_from(f"<{n}{fmt}", bin_, ptr))
        for n, ptr in zip(lengths, pointers, strict=True)
    ]
    assert sum(lengths) * itemsize == len(bin_)
    return PUBLISHED_CODES[code], docs, list(pointers)


def random_documents(rng, count, high, dtype):
    lengths = rng.integers(0, 50, size=count)
    return [rng.integers(0, high, size=n).astype(dtype) for n in lengths]


def write_shard(docs, dtype, batch=7):
    bin_file, idx_file = io.BytesIO(), io.BytesIO()
    writer = ShardWriter(bin_file, idx_file, dtype)
    for start in range(0, len(docs), batch):  # several add() calls, several docs per call
        chunk = docs[start : start + batch]
        writer.add(
            np.concatenate(chunk) if chunk else np.zeros(0, dtype),
            np.array([d.size for d in chunk], dtype=np.int64),
        )
    info = writer.close()
    return info, bin_file.getvalue(), idx_file.getvalue()


@pytest.mark.parametrize(
    ("dtype", "high", "code_name"), [(np.uint16, 65_499, "u2"), (np.int32, 2**31 - 1, "i4")]
)
def test_independent_reader_round_trip(dtype, high, code_name):
    docs = random_documents(np.random.default_rng(7), 60, high, dtype)
    info, bin_, idx = write_shard(docs, dtype)

    got_dtype, got_docs, pointers = reference_read(idx, bin_)
    assert got_dtype == code_name
    assert got_docs == [d.tolist() for d in docs]
    itemsize = np.dtype(dtype).itemsize
    assert pointers == [0, *np.cumsum([d.size * itemsize for d in docs[:-1]]).tolist()]
    assert (info.documents, info.tokens) == (60, sum(d.size for d in docs))
    assert (info.bin_bytes, info.idx_bytes) == (len(bin_), len(idx))
    assert len(idx) == 34 + 12 * 60 + 8 * 61

    shard = read_shard(bin_, idx)
    assert len(shard) == 60
    for got, want in zip(iter_documents(bin_, decode_index(idx)), docs, strict=True):
        assert got.dtype == np.dtype(dtype) and np.array_equal(got, want)
    assert np.array_equal(shard[-1], docs[-1])


def test_checksums_are_xxh3_128_of_written_bytes():
    docs = random_documents(np.random.default_rng(1), 30, 1000, np.uint16)
    info, bin_, idx = write_shard(docs, np.uint16)
    assert info.bin_xxh3_128 == xxhash.xxh3_128_hexdigest(bin_)
    assert info.idx_xxh3_128 == xxhash.xxh3_128_hexdigest(idx)
    assert len(info.bin_xxh3_128) == 32


def test_files_on_disk_read_like_megatron(tmp_path):
    """Write through fsspec to a path prefix, then read the way Megatron does: memmap .bin and
    frombuffer(count=length, offset=pointer) with pointers from the struct-parsed .idx."""
    docs = random_documents(np.random.default_rng(3), 20, 50_000, np.uint16)
    prefix = tmp_path / "shard-00000"
    with (
        fsspec.open(f"{prefix}.bin", "wb") as bin_file,
        fsspec.open(f"{prefix}.idx", "wb") as idx_file,
    ):
        writer = ShardWriter(bin_file, idx_file, token_dtype(50_000))
        writer.add(np.concatenate(docs), np.array([d.size for d in docs]))
        info = writer.close()
    idx = (tmp_path / "shard-00000.idx").read_bytes()
    seq_count = struct.unpack_from("<Q", idx, 18)[0]
    lengths = struct.unpack_from(f"<{seq_count}i", idx, 34)
    pointers = struct.unpack_from(f"<{seq_count}q", idx, 34 + 4 * seq_count)
    mapped = np.memmap(f"{prefix}.bin", mode="r", order="C")
    for n, ptr, want in zip(lengths, pointers, docs, strict=True):
        assert np.array_equal(np.frombuffer(mapped, dtype=np.uint16, count=n, offset=ptr), want)
    assert info.bin_bytes == (tmp_path / "shard-00000.bin").stat().st_size


def test_empty_shard_is_well_formed():
    info, bin_, idx = write_shard([], np.uint16)
    assert bin_ == b""
    assert idx == b"MMIDIDX\x00\x00" + struct.pack("<QBQQq", 1, 8, 0, 1, 0)
    assert (info.documents, info.tokens, info.bin_bytes, info.idx_bytes) == (0, 0, 0, 42)
    assert reference_read(idx, bin_) == ("u2", [], [])
    decoded = decode_index(idx)
    assert decoded.sequence_count == 0 and decoded.doc_indices.tolist() == [0]
    assert list(read_shard(bin_, idx)) == []


def test_zero_length_documents_keep_their_place():
    docs = [np.array([5, 6], np.uint16), np.zeros(0, np.uint16), np.array([7], np.uint16)]
    _, bin_, idx = write_shard(docs, np.uint16)
    assert reference_read(idx, bin_)[1:] == ([[5, 6], [], [7]], [0, 4, 4])
    assert [d.tolist() for d in read_shard(bin_, idx)] == [[5, 6], [], [7]]


def test_dtype_table_and_token_dtype():
    assert {code: dt.str[1:] for code, dt in DTYPE_CODES.items()} == PUBLISHED_CODES
    assert token_dtype(65_499) == np.dtype("<u2")
    assert token_dtype(65_500) == np.dtype("<i4")
    assert token_dtype(32_000).itemsize == 2
    with pytest.raises(ValueError):
        token_dtype(0)


def test_big_endian_tokens_are_written_little_endian():
    tokens = np.array([1, 258, 65_000], dtype=">u2")
    _, bin_, _ = write_shard([tokens], np.uint16)
    assert bin_ == struct.pack("<3H", 1, 258, 65_000)


def test_writer_rejects_bad_input():
    writer = ShardWriter(io.BytesIO(), io.BytesIO(), np.uint16)
    with pytest.raises(TypeError, match="dtype int32"):
        writer.add(np.array([1, 2], np.int32), np.array([2]))
    with pytest.raises(ValueError, match="sum to 3 but 2 tokens"):
        writer.add(np.array([1, 2], np.uint16), np.array([3]))
    with pytest.raises(ValueError, match=r"\[0, 2\*\*31 - 1\]"):
        writer.add(np.array([1, 2], np.uint16), np.array([3, -1]))
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.add(np.array([1], np.uint16), np.array([1]))
    with pytest.raises(ValueError, match="no Megatron dtype code"):
        ShardWriter(io.BytesIO(), io.BytesIO(), np.bool_)


def test_encode_index_matches_writer():
    docs = random_documents(np.random.default_rng(5), 12, 100, np.int32)
    _, _, idx = write_shard(docs, np.int32)
    assert encode_index(np.array([d.size for d in docs]), np.int32) == idx


# --- decode_index rejects malformed indices, each with a message naming the defect ---------

GOOD = encode_index(np.array([3, 0, 5, 2]), np.uint16)  # 4 sequences, 5 document indices
POINTERS_AT = 34 + 4 * 4
DOC_INDICES_AT = 34 + 12 * 4


def patched(offset: int, fmt: str, value) -> bytes:
    buf = bytearray(GOOD)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


@pytest.mark.parametrize(
    ("buf", "message"),
    [
        (b"MMIDIDY\x00\x00" + GOOD[9:], r"bad magic b'MMIDIDY"),
        (patched(9, "<Q", 2), "unsupported version 2, expected 1"),
        (patched(17, "<B", 9), "unknown dtype code 9"),
        (patched(17, "<B", 0), "unknown dtype code 0"),
        (GOOD[:20], "truncated header: 20 bytes"),
        (
            GOOD[:-1],
            "truncated: .* 4 sequences and 5 documents, which take 122 bytes, buffer has 121",
        ),
        (GOOD + b"\x00", "1 trailing bytes: .* take 122 bytes, buffer has 123"),
        (patched(26, "<Q", 0), "document_count is 0"),
        (patched(POINTERS_AT + 8, "<q", 7), "sequence 1 pointer is 7, .* byte 6"),
        (patched(34 + 4, "<i", -1), "sequence 1 has negative length -1"),
        (patched(DOC_INDICES_AT, "<q", 1), "must start at 0, starts at 1"),
        (patched(DOC_INDICES_AT + 16, "<q", 0), "decrease at entry 2: 1 -> 0"),
        (patched(DOC_INDICES_AT + 32, "<q", 3), "end at 3, must end at sequence_count 4"),
    ],
    ids=[
        "magic",
        "version",
        "dtype-9",
        "dtype-0",
        "short-header",
        "truncated",
        "trailing",
        "no-doc-count",
        "pointer",
        "negative-length",
        "doc-start",
        "doc-decrease",
        "doc-end",
    ],
)
def test_decode_rejects(buf, message):
    with pytest.raises(IndexFormatError, match=message):
        decode_index(buf)


def test_decode_accepts_good_index_zero_copy():
    info = decode_index(memoryview(GOOD))
    assert info.dtype == np.dtype("<u2")
    assert info.lengths.tolist() == [3, 0, 5, 2]
    assert info.pointers.tolist() == [0, 6, 6, 16]
    assert info.doc_indices.tolist() == [0, 1, 2, 3, 4]
    assert not info.lengths.flags.writeable  # a view into the buffer, not a copy


def test_bin_size_must_match_index():
    with pytest.raises(ShardFormatError, match=".bin has 18 bytes but the index describes 20"):
        read_shard(b"\x00" * 18, GOOD)
