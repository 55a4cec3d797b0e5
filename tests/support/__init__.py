"""What tests share: the repository's paths and commands (paths.py) and test inputs (data.py).
pytest puts tests/ on sys.path (pyproject.toml), so a test imports `from support import ...`;
fixtures stay in tests/conftest.py."""

from support.data import (
    SPARSE_BOS,
    SPARSE_EOS,
    SPARSE_IDS,
    SPARSE_WORD,
    chain_config,
    jsonl,
    jsonl_records,
    s3_config,
    setter,
    sparse_tokenizer,
    unigram,
)
from support.documents import run_documents, unit_documents
from support.paths import (
    REPO,
    SAMPLE,
    SAMPLE_CONFIG,
    SOURCES_CONFIG,
    TOKENIZER,
    own_ray_env,
    run_command,
)
from support.waiting import wait_until

__all__ = [
    "wait_until",
    "unigram",
    "REPO",
    "SAMPLE",
    "SAMPLE_CONFIG",
    "SOURCES_CONFIG",
    "TOKENIZER",
    "jsonl",
    "jsonl_records",
    "own_ray_env",
    "run_command",
    "run_documents",
    "unit_documents",
    "s3_config",
    "setter",
    "sparse_tokenizer",
    "SPARSE_BOS",
    "SPARSE_EOS",
    "SPARSE_IDS",
    "SPARSE_WORD",
    "chain_config",
]
