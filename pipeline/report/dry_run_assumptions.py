"""What the dry run assumes where a plan cannot know the corpus: document and row sizes,
token bytes and their compression, a worker's memory, and each stage's rate per core.

Contract: figures only, each with what it stands for and where it comes from; a plan's options
override the sizes (--docs, --file-bytes, --token-ratio, --stored-ratio) and `bench scaling`'s
JSON the rates (--rates: report/dry_run.py rates_from_bench).
"""

MiB = 2**20
DOC_BYTES = 4000  # assumed mean document size when --docs is not given
FILE_BYTES = 2**30  # assumed input file size when --file-bytes is not given
S3FS_BLOCK = 50 * MiB  # s3fs reads and multipart parts go in blocks of this size
DOC_ROW_BYTES = 40  # a unit's documents file (ids, row; no text), Parquet, per document
TOKEN_BYTES_RATIO = 0.77  # uint16 token bytes / text bytes (8k byte-level BPE, 3.3 B/token)
TOKEN_BYTES = 2  # bytes per token without a config's tokenizer: uint16 (formats/megatron.py)
# stored / raw bytes of the token files and pack's exchange token sections (zstd frames,
# tokens/framed.py). A plan cannot know a corpus's ratio: this is the shipped sample's
# (configs/sample.yaml: 0.531, i.e. 1.88x), the least compressible corpus at hand (corpus64 in
# 16 MiB units: 0.361; corpus1g, make_corpus, in 64 MiB units: 0.389), rounded up: the plan errs
# on more bytes, not fewer
TOKEN_STORED_RATIO = 0.56
HASH_ROW_BYTES = 80  # exact hash row per document (hash, ids), Parquet
KEY_BYTES = 8  # a document's key in its band object's key section (dedup/band_rows.py)
REQUEST_ROW_BYTES = 20  # a candidate's signature request: key, label, unit index
# assumed per document (web-like corpora): documents with a candidate pair after banding
# (whose signatures near_fetch moves; make_corpus, dup-heavy by design, has 0.45), removals
# (exact + near) and the bytes of one removal row
CANDIDATE_DOCS_PER_DOC = 0.3
REMOVED_PER_DOC = 0.1
REMOVED_ROW_BYTES = 150
WORKER_BASE_MB = 250  # a Ray worker with pyarrow, numpy and the tokenizer loaded
# MB/s of input per core per stage: `bench scaling --mb 512`, W=1 (one pinned core, one engine
# thread), on its 549 MB make_corpus corpus with fastokens; the read task tokenizes, signs and
# hashes (17.3 MB/s per core in all; rerun it and pass --rates)
DEFAULT_RATES = {
    "list": 35505.4,
    "read+hash": 26.7,
    "quarantine": 7835.0,
    "exact": 851.4,
    "near": 173.1,
    "audit": 3592.9,
    "select": 985.4,
    "pack": 105.2,
}
