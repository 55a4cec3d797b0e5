import random
import unicodedata

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from pipeline.dedup import minhash_kernel
from pipeline.dedup.edges import candidate_pairs, star_edges, unique_edges
from pipeline.dedup.minhash import (
    PUNCTUATION,
    MinHashParams,
    band_hashes,
    estimated_jaccard,
    exact_jaccard,
    narrowed,
    permutation_coefficients,
    shingle_set,
    signatures,
    verified_edges,
    word_lists,
)

SMALL = MinHashParams(num_perm=32, bands=8, rows=4, seed=3)
MASK64 = (1 << 64) - 1


def random_text(rng: random.Random, n_words: int, vocabulary_size: int = 3000) -> str:
    vocabulary = [f"w{i}x" for i in range(vocabulary_size)]
    return " ".join(rng.choice(vocabulary) for _ in range(n_words))


def edit_words(text: str, rate: float, rng: random.Random) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), max(1, int(rate * len(words)))):
        words[i] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


# --- an independent, straightforward reference: Python ints, one shingle at a time -----------


def reference_words(text: str) -> list[str]:
    words = [w.strip(PUNCTUATION) for w in unicodedata.normalize("NFC", text).lower().split()]
    return [w for w in words if w]


def fmix64_int(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


def reference_signature(text: str, params: MinHashParams) -> list[int]:
    hashes = [xxhash.xxh3_64_intdigest(w.encode(), seed=params.seed) for w in reference_words(text)]
    n = params.ngram
    windows = (
        [hashes[i : i + n] for i in range(len(hashes) - n + 1)]
        if len(hashes) >= n
        else ([hashes] if hashes else [])
    )
    shingles = []
    for window in windows:
        acc = 0
        for h in window:
            acc = (acc * 0x9E3779B97F4A7C15 + h) & MASK64
        shingles.append(fmix64_int(acc) & 0xFFFFFFFF)
    a, b = permutation_coefficients(params)
    return [
        min(((int(a[j]) * s + int(b[j])) & 0xFFFFFFFF for s in shingles), default=0xFFFFFFFF)
        for j in range(params.num_perm)
    ]


TRICKY = [
    "The quick brown fox jumps over the lazy dog. The END!",
    "Hi there",  # shorter than ngram: one shingle
    "",
    "   ... --- !!! ",  # no words at all
    "Cafe\u0301 CAFÉ café, naïve: «quoted» text; don't stop — really\tnow\nnext line",
    "a\xa0b\u2003c\u3000d e f g",
    # ASCII only (the ASCII kernels): U+001C..U+001F are whitespace to str.split and to
    # utf8_split_whitespace, not to ascii_split_whitespace; punctuation-only tokens drop out
    "File\x1cGroup\x1dRecord\x1eUnit\x1fSep -- (Quoted), 'x' ... END.",
]


def test_signatures_match_reference_computation():
    rng = random.Random(1)
    texts = TRICKY + [random_text(rng, k) for k in (4, 5, 6, 50, 400)]
    sigs = signatures(texts, SMALL)
    assert sigs.dtype == np.uint32 and sigs.shape == (len(texts), SMALL.num_perm)
    for text, row in zip(texts, sigs, strict=True):
        assert row.tolist() == reference_signature(text, SMALL), text


def test_words_follow_documented_rule():
    rng = random.Random(2)
    texts = [*TRICKY, random_text(rng, 30)]
    assert word_lists(texts) == [reference_words(t) for t in texts]
    assert word_lists(["Cafe\u0301, DON'T (stop)."]) == [["café", "don't", "stop"]]


def test_empty_and_null_docs_get_empty_set_signature():
    sigs = signatures(["", None, " ... "], SMALL)
    assert (sigs == np.uint32(0xFFFFFFFF)).all()


def test_results_independent_of_batching_and_input_type():
    rng = random.Random(3)
    texts = [random_text(rng, rng.randrange(0, 300)) for _ in range(60)]
    whole = signatures(texts, SMALL)
    tiny = signatures(pa.array(texts), SMALL, batch_bytes=100, chunk_shingles=7)
    chunked = signatures(pa.chunked_array([texts[:25], texts[25:]]), SMALL, chunk_shingles=64)
    assert (whole == tiny).all() and (whole == chunked).all()
    # chunk by chunk (no copy of the whole), an empty chunk and a null among them
    pieces = pa.chunked_array([texts[:7], [], [None, *texts[8:30]], texts[30:]], pa.string())
    with_null = signatures(pieces, SMALL, batch_bytes=500)
    assert (with_null[np.arange(60) != 7] == whole[np.arange(60) != 7]).all()
    assert (with_null[7] == signatures([""], SMALL)[0]).all()
    assert (signatures(texts[10:20], SMALL) == whole[10:20]).all()


def test_ascii_and_other_documents_of_one_batch_sign_as_alone():
    """A batch mixing ASCII and non-ASCII documents (signed as two groups) gives every row the
    signature of its document signed alone."""
    rng = random.Random(4)
    texts = [random_text(rng, 40) + ("" if i % 3 else " naïve Ünïcode") for i in range(30)]
    texts += TRICKY
    together = signatures(texts, SMALL)
    for i, text in enumerate(texts):
        assert (together[i] == signatures([text], SMALL)[0]).all(), text


def test_near_duplicates_score_high_and_unrelated_low():
    rng = random.Random(4)
    params = MinHashParams()
    base = [random_text(rng, 600) for _ in range(4)]
    near = [edit_words(t, 0.01, rng) for t in base]
    sigs = signatures(base + near, params)
    est_near = estimated_jaccard(sigs[:4], sigs[4:])
    exact_near = [
        exact_jaccard(shingle_set(a), shingle_set(b)) for a, b in zip(base, near, strict=True)
    ]
    assert (est_near >= params.threshold).all()
    assert np.abs(est_near - exact_near).max() < 0.08
    assert estimated_jaccard(sigs[0], sigs[1]) < 0.05


def test_narrowed_signatures_correct_for_chance_matches():
    rng = random.Random(7)
    params = MinHashParams()
    base = [random_text(rng, 600) for _ in range(20)]
    near = [edit_words(t, 0.02, rng) for t in base]
    full = signatures(base + near, params)
    exact = np.array(
        [exact_jaccard(shingle_set(a), shingle_set(b)) for a, b in zip(base, near, strict=True)]
    )
    for bits in (8, 16):
        sigs = narrowed(full, bits)
        assert sigs.dtype.itemsize * 8 == bits
        assert (sigs == (full % 2**bits)).all()
        est = estimated_jaccard(sigs[:20], sigs[20:])
        assert np.abs(est - exact).max() < 0.08
        # unrelated documents: b-bit values match by chance 2^-b of the time (760 pairs here),
        # which the estimate takes out
        pairs = [(i, j) for i in range(40) for j in range(i + 1, 40) if j != i + 20]
        a, b = (sigs[[p[k] for p in pairs]] for k in (0, 1))
        raw = np.mean(a == b, axis=-1)
        assert np.isclose(raw.mean(), 2.0**-bits, rtol=0.3, atol=1e-4)
        assert abs(estimated_jaccard(a, b).mean()) < 0.01 and estimated_jaccard(a, b).min() >= 0
        assert estimated_jaccard(sigs[0], sigs[0]) == 1.0


def test_band_hashes_change_only_with_their_band():
    rng = np.random.default_rng(5)
    sigs = rng.integers(0, 2**32, (3, SMALL.num_perm), dtype=np.uint32)
    sigs[1] = sigs[0]
    sigs[1, SMALL.rows * 2] ^= 1  # one value of band 2
    bands = band_hashes(sigs, SMALL)
    assert bands.shape == (3, SMALL.bands) and bands.dtype == np.uint64
    assert (bands[0] == bands[1]).sum() == SMALL.bands - 1 and bands[0, 2] != bands[1, 2]
    same_rows = np.tile(sigs[2, : SMALL.rows], SMALL.num_perm // SMALL.rows)[None, :]
    assert len(set(band_hashes(same_rows, SMALL)[0].tolist())) == SMALL.bands  # bands distinct


def test_star_edges_link_every_bucket_member_to_its_smallest_key():
    hashes = np.array([7, 7, 7, 9, 9, 11], dtype=np.uint64)
    keys = np.array([30, 10, 20, 5, 6, 1], dtype=np.int64)
    assert star_edges(hashes, keys).tolist() == [[5, 6], [10, 20], [10, 30]]


@pytest.mark.parametrize(
    "units, positions",
    [(1, 2**32), (2**21, 2**11), (2**31, 1), (2**31, 2**4), (2**30, 2**32)],
)
def test_unique_edges_sorts_node_ids_and_keeps_each_once(units, positions):
    """Node ids (unit << 32 | position) of small and huge runs: the rows sorted by (source,
    target), each once, whether both ids of an edge fit one uint64 (the first three, up to its
    top bit) or not."""
    rng = np.random.default_rng(units + positions)
    ids = (rng.integers(0, units, 3000, dtype=np.int64) << 32) | rng.integers(0, positions, 3000)
    edges = ids[rng.integers(0, 3000, (6000, 2))]
    expected = sorted(set(map(tuple, edges.tolist())))
    assert unique_edges(edges).tolist() == [list(e) for e in expected]
    signed = edges - 2**62  # negative keys (node_keys' hashes)
    assert unique_edges(signed).tolist() == [[a - 2**62, b - 2**62] for a, b in expected]


def test_star_edges_of_unsorted_rows_with_a_key_twice_in_a_bucket():
    hashes = np.array([9, 7, 9, 7, 7, 9, 3], dtype=np.uint64)
    keys = np.array([8, 4, 2, 4, 6, 8, 1], dtype=np.int64)
    assert star_edges(hashes, keys).tolist() == [[2, 8], [4, 6]]
    assert star_edges(hashes[:0], keys[:0]).tolist() == []


def test_candidates_and_verification_keep_near_pairs_only():
    rng = random.Random(6)
    params = MinHashParams()
    base = [random_text(rng, 500) for _ in range(5)]
    texts = base + [edit_words(base[0], 0.01, rng), edit_words(base[1], 0.3, rng)]
    sigs = signatures(texts, params)
    keys = np.arange(100, 100 + len(texts), dtype=np.int64)
    pairs = candidate_pairs(band_hashes(sigs, params), keys)
    edges, sims = verified_edges(pairs, keys, sigs, params.threshold)
    assert edges.tolist() == [[100, 105]] and sims[0] >= params.threshold


def test_shingle_set_rules():
    assert shingle_set("One two", 5) == frozenset(["one two"])
    assert shingle_set("", 5) == frozenset()
    assert shingle_set("a b c d e f", 5) == frozenset(["a b c d e", "b c d e f"])
    assert exact_jaccard(frozenset(), frozenset()) == 1.0
    assert exact_jaccard(frozenset("ab"), frozenset("bc")) == pytest.approx(1 / 3)


def test_params_are_validated():
    with pytest.raises(ValueError):
        MinHashParams(num_perm=64, bands=10, rows=8)
    default = MinHashParams()
    assert default.bands * default.rows <= default.num_perm and default.ngram == 5


def test_compiled_kernel_gives_the_numpy_paths_values():
    """minhash_kernel (numba: ASCII words and fused shingling + permutations) against the numpy
    path, on every ASCII character as text, punctuation runs, 1..ngram-word texts and a mix with
    non-ASCII documents in one batch."""
    assert minhash_kernel.available()  # numba is a dependency: the compiled path is the one run
    rng = random.Random(8)
    alphabet = [chr(c) for c in range(128)] + ["Word", "ABC", "...", "x", "é", "\u3000"]
    texts = [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 90))) for _ in range(3000)
    ]
    texts += [random_text(rng, k) for k in range(0, 12)] + TRICKY + [None, "", " A "]
    for params in (SMALL, MinHashParams(), MinHashParams(ngram=1, num_perm=16, bands=4, rows=4)):
        compiled = signatures(texts, params, batch_bytes=4096)
        assert (compiled == signatures(texts, params, compiled=False)).all()
    for text in TRICKY + ["A\x1cB\x1fC", "(x) -- y!"]:  # and the reference, one by one
        assert signatures([text], SMALL)[0].tolist() == reference_signature(text, SMALL), text


def test_compiled_kernel_on_both_sides_of_its_four_shingle_blocks():
    """Documents of 0 to ngram + 9 words: 0 to 10 shingles, so every count of whole blocks of
    four and every remainder, beside each other in one batch, at two shingle lengths."""
    assert minhash_kernel.available()
    rng = random.Random(9)
    for params in (MinHashParams(), MinHashParams(ngram=3, num_perm=40, bands=8, rows=5)):
        texts = [random_text(rng, k, vocabulary_size=50) for k in range(params.ngram + 10)]
        rng.shuffle(texts)
        compiled = signatures(texts, params)
        assert (compiled == signatures(texts, params, compiled=False)).all()
        for text in texts:  # one by one: a row depends on its document only
            assert (signatures([text], params) == signatures([text], params, compiled=False)).all()
