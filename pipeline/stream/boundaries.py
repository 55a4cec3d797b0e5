"""Document boundaries inside a window, from EOS (pure core of `StreamReader(boundaries=True)`).

Every document is stored as `[BOS] ids EOS` (tokens/encode.py `frame`), and with
`tokenize.special_tokens_in_text: text` (the default, recorded in the manifest) the EOS id occurs
nowhere else: a document starts right after each EOS. For a window of L + 1 tokens (inputs
`tokens[:-1]`, labels `tokens[1:]`):
- `cu_seqlens` (int32): 0, then each position i in 1..L-1 whose input tokens[i - 1] is EOS, then L:
  the inputs cut into documents, as flash-attention's varlen kernels take them;
- `position_ids` (int64, L): i minus the start of the document holding input i, so positions
  restart at 0 at each document and at the window's start (a document cut by the window edge
  starts again at 0, as Megatron's reset_position_ids does).
A weighted mixture cuts shards into pieces at arbitrary tokens (mixture.py), so a piece can start
or end inside a document; the reader passes each piece's start as a `cut`, a boundary too (the
rest of a cut document is attended on its own, never with the piece before it, which has no EOS
between them). Whole shards always end with an EOS, so unweighted versions have no cuts.
The loss mask is left to the trainer (docs/reading.md): `tokens[:-1] != eos_id` masks the
prediction of a document's first token from the previous document's EOS.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pipeline.formats.manifest import ManifestError


class Window(NamedTuple):
    tokens: np.ndarray  # L + 1 tokens: inputs tokens[:-1], labels tokens[1:]
    cu_seqlens: np.ndarray  # int32, document starts within the inputs, then L
    position_ids: np.ndarray  # int64, L


def with_boundaries(tokens: np.ndarray, eos_id: int, cuts: np.ndarray | None = None) -> Window:
    """The window with its boundaries; `cuts`: other positions in 1..L-1 where a span starts."""
    inputs = tokens[:-1]
    n = len(inputs)
    starts = np.flatnonzero(inputs[:-1] == eos_id) + 1
    if cuts is not None and len(cuts):
        starts = np.union1d(starts, cuts)
    cu = np.concatenate([[0], starts, [n]]).astype(np.int32)
    positions = np.arange(n, dtype=np.int64)
    positions -= np.repeat(cu[:-1].astype(np.int64), np.diff(cu))
    return Window(tokens, cu, positions)


def eos_id(manifest: dict[str, Any], where: str) -> int:
    """The manifest's EOS id, if EOS marks every document end and nothing else."""
    tokenizer = manifest.get("tokenizer") or {}
    eos = tokenizer.get("eos_id")
    if eos is None:
        raise ManifestError(f"{where}: the manifest names no eos_id: no document boundaries")
    if tokenizer.get("special_tokens_in_text") == "special":
        raise ManifestError(
            f"{where}: tokenized with special_tokens_in_text: special, so EOS ids may occur inside"
            " documents: boundaries from EOS would be wrong"
        )
    return int(eos)
