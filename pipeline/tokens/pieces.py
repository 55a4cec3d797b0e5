"""Long documents encoded in pieces, with the ids of the whole (pure core).

`can_cut` decides from the tokenizer.json whether pieces give exactly the ids of the whole
document (byte-level BPE with a safe split regex, no normalizer, no whitespace-touching added
token matched in text); `cut_points` puts the cuts before a space or newline with an ASCII
letter or digit on both sides, where those pre-tokenizers always split.

Contract: where `can_cut` is true the pieces' ids equal the whole document's (the argument:
docs/tokenize.md, "Why the pieces give the ids of the whole"; tests/unit/test_pieces.py and
`bench pieces` check it on long real text with both engines); anything else is encoded whole,
its memory bounded by `ingest.max_doc_bytes`.
"""

from __future__ import annotations

import json
import re

import numpy as np

PIECE_CHARS = 1 << 18  # 256 Ki characters: ~45 MB of Encoding in tokenizers
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CL100K_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
O200K_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SAFE_PATTERNS = frozenset({GPT2_PATTERN, CL100K_PATTERN, O200K_PATTERN})
_SAFE = {" \n": "[A-Za-z0-9](?=[ \n][A-Za-z0-9])", " ": "[A-Za-z0-9](?= [A-Za-z0-9])"}
_FIRST = {cut: re.compile(safe) for cut, safe in _SAFE.items()}
# the last safe position of a span: `.*` runs to the span's end and gives back one character at
# a time, so the work is the distance from the end, not a Python step per safe position
_LAST = {cut: re.compile("(?s:.*)" + safe) for cut, safe in _SAFE.items()}


def can_cut(raw: bytes, special_as_text: bool) -> str | None:
    """The characters a long document of this tokenizer.json may be cut before (" \\n" or " "),
    or None when its pieces might not give the whole's ids (see the module docstring)."""
    spec = json.loads(raw)
    model = spec.get("model") or {}
    if spec.get("normalizer") is not None or model.get("type") != "BPE" or model.get("dropout"):
        return None
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel":
        if not steps[0].get("use_regex", True):
            return None
        level = steps[0]
    elif len(steps) == 2 and [s.get("type") for s in steps] == ["Split", "ByteLevel"]:
        split, level = steps
        pattern = (split.get("pattern") or {}).get("Regex")
        if (
            pattern not in SAFE_PATTERNS
            or split.get("behavior") != "Isolated"
            or split.get("invert")
            or level.get("use_regex", True)
        ):
            return None
    else:
        return None
    for token in spec.get("added_tokens") or []:
        matched = not (token.get("special") and special_as_text)
        content = token.get("content", "")
        if matched and (
            any(c.isspace() for c in content) or token.get("lstrip") or token.get("rstrip")
        ):
            return None
    return " " if level.get("add_prefix_space") else " \n"


def cut_points(text: str, cut_before: str, piece_chars: int = PIECE_CHARS) -> list[int]:
    """Where to cut `text` into pieces of at most `piece_chars` characters where possible: the
    last safe position in the second half of each piece's span, else the first one after it
    (a piece grows past the limit only where the text has no safe position). Deterministic:
    it depends on the text alone."""
    cuts, start = [], 0
    while (cut := next_cut(text, cut_before, start, piece_chars)) is not None:
        cuts.append(start := cut)
    return cuts


def next_cut(text: str, cut_before: str, start: int, piece_chars: int) -> int | None:
    """The end of the piece of `text` that starts at `start` (see cut_points), or None when the
    rest is one piece."""
    if len(text) - start <= piece_chars:
        return None
    end = start + piece_chars
    found = _LAST[cut_before].match(text, start + piece_chars // 2, end)
    found = found or _FIRST[cut_before].search(text, end)
    return None if found is None else found.end()


def leading_piece(text: str, cut_before: str | None, piece_chars: int) -> str:
    """The first piece of `text` cut into pieces of `piece_chars` characters (cut_points): its
    ids are the first ids of the whole text. `text` itself when it is one piece or cannot be
    cut."""
    cut = None if cut_before is None else next_cut(text, cut_before, 0, piece_chars)
    return text if cut is None else text[:cut]


def split_long(
    texts: list[str], cut_before: str | None, piece_chars: int = PIECE_CHARS
) -> tuple[list[str], np.ndarray] | None:
    """(pieces, index of the text each piece belongs to), or None when no text is cut."""
    if cut_before is None or all(len(t) <= piece_chars for t in texts):
        return None
    pieces, owner = [], []
    for i, text in enumerate(texts):
        bounds = [0, *cut_points(text, cut_before, piece_chars), len(text)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            pieces.append(text[a:b])
            owner.append(i)
    return pieces, np.asarray(owner, np.int64)


def per_text(lengths: np.ndarray, owner: np.ndarray, texts: int) -> np.ndarray:
    """The token count of each text from its pieces' counts."""
    out = np.zeros(texts, np.int64)
    np.add.at(out, owner, lengths)
    return out
