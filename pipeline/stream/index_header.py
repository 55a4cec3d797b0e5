"""The reader's check before its first token: the shards decode as the manifest says.

The first non-empty shard's .idx header (formats/megatron.py) is read in one ranged request and
must state the manifest's token dtype and document count; a mismatch is a ManifestError naming the
index, raised when the reader is made, with or without verify_checksums.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.storage import Location
from pipeline.formats.manifest import ManifestError
from pipeline.formats.megatron import HEADER_SIZE, header_fields


def check_index_header(version: Location, shards: list[dict], dtype: np.dtype) -> None:
    """The first non-empty shard's .idx header (34 bytes, one ranged read) must state the
    manifest's dtype and document count: otherwise every token read would be misdecoded (two
    uint16 ids read as one uint32), checksums or not."""
    shard = next((s for s in shards if s["documents"]), None)
    if shard is None:
        return
    where = (version / shard["idx"]).uri
    try:
        header_dtype, seq_count = header_fields((version / shard["idx"]).read_bytes(0, HEADER_SIZE))
    except OSError as e:
        raise ManifestError(f"{where}: cannot read the index header: {e}") from None
    if header_dtype != dtype or seq_count != shard["documents"]:
        raise ManifestError(
            f"{where}: the index header states {header_dtype} tokens in {seq_count} documents,"
            f" the manifest {dtype} in {shard['documents']}: refusing to misread the shards"
        )
