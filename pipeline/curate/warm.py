"""Compile (or load from dedup/kernel_cache.py's shared folder) the compiled loops of a run's
curation steps before its first read task needs them.

Each built-in step a chain names is built with its default parameters and run once, under the
machine-wide compile lock, on PROBE: a few documents that reach every compiled path the steps
take (words, lines, paragraphs, repeated n-grams, non-ASCII text, e-mail and IP hints). A step
that cannot be built from defaults alone (it needs a word list, benchmarks, a module or a
model) is left out: its loops, if any, compile on first use, as before; unless its class has a
`warm(texts)` of its own (fasttext_classifier: its compiled predict is the language step's,
warmed on the shipped lid.176 model). The driver names the steps without
importing numba (`step_names`); `warm` runs in the compile child (dedup/warm_kernels.py) and
in each worker as it starts (run/ray_env.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_LINES = "\n".join(
    [
        "The quick brown fox jumps over the lazy dog, and then it runs into the woods.",
        "It was a bright cold day in April; the clocks were striking thirteen...",
        "- a bullet line",
        "Contact us at someone@example.com or at 192.168.0.1 and fe80::1 today.",
    ]
)
_TEXTS = [
    _LINES + "\n\n" + _LINES + "\n\n" + "Ünïcödé wörds — naïve café façade.\n" + _LINES,
    "lorem ipsum dolor sit amet {curly} javascript",
    "",
    "short",
]


def step_names(chains: Iterable[list[dict[str, Any]]]) -> list[str]:
    """The distinct step names of the chains (each entry a one-key mapping), in first-seen
    order; an empty list when no source curates."""
    names: dict[str, None] = {}
    for chain in chains:
        for entry in chain:
            names.update(dict.fromkeys(entry))
    return list(names)


def warm(names: Iterable[str]) -> list[str]:
    """Run each named built-in step once on the probe documents; returns the names warmed."""
    import pyarrow as pa

    from pipeline.curate import chain
    from pipeline.dedup import kernel_cache

    n = len(_TEXTS)
    probe = pa.table(
        {
            "doc_id": [f"probe-{i}" for i in range(n)],
            "source": ["probe"] * n,
            "row": list(range(n)),
            "text": _TEXTS,
        }
    )
    warmed = []
    for name in names:
        own = getattr(chain.REGISTRY.get(name), "warm", None)
        try:
            steps = chain.build(chain.parse([{name: {}}])) if own is None else []
        except Exception:  # noqa: BLE001 - needs parameters or files: compiled on first use
            continue
        with kernel_cache.compiling():
            if own is not None:
                own(probe["text"])
            else:
                chain.apply(steps, probe)
        warmed.append(name)
    return warmed
