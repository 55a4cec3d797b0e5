"""Train the shipped byte-level BPE tokenizer on the sample corpus.

    python -m pipeline.tools.train_tokenizer --input sample --out configs/tokenizer.json \\
        --vocab-size 8192

No tokenizer can be downloaded on the machines this project runs on, so one is trained here with
HF `tokenizers` (GPT-2 style: ByteLevel pre-tokenizer and decoder, so every string round-trips).
Training reads the texts in listing order and is deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from pipeline.tools.sample_io import iter_texts

END_OF_TEXT = "<|endoftext|>"
ROUND_TRIP_PROBES = (
    "Grüße aus Köln: naïve café, Øresund, Ελληνικά, 日本語, emoji 🙂, tabs\tand\r\nCRLF.",
    "e\u0301 (NFD) vs \u00e9 (NFC)",
    "  leading and trailing spaces  ",
)


def build_tokenizer(texts: list[str], vocab_size: int, min_frequency: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[END_OF_TEXT],  # first, so its id is 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def round_trips(tokenizer: Tokenizer, text: str) -> bool:
    ids = tokenizer.encode(text).ids
    return tokenizer.decode(ids, skip_special_tokens=False) == text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=Path("sample"))
    parser.add_argument("--out", type=Path, default=Path("configs/tokenizer.json"))
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--min-frequency", type=int, default=2)
    args = parser.parse_args(argv)
    # One thread: merge ties must not depend on scheduling.
    os.environ.setdefault("RAYON_NUM_THREADS", "1")

    texts = list(iter_texts(args.input))
    tokenizer = build_tokenizer(texts, args.vocab_size, args.min_frequency)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(args.out), pretty=False)

    probes = [*ROUND_TRIP_PROBES, *texts[:: max(1, len(texts) // 20)]]
    text_bytes = sum(len(t.encode()) for t in texts)
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
    figures = {
        "docs": len(texts),
        "text_bytes": text_bytes,
        "vocab_size": tokenizer.get_vocab_size(),
        "end_of_text_id": tokenizer.token_to_id(END_OF_TEXT),
        "tokens": tokens,
        "bytes_per_token": round(text_bytes / tokens, 3),
        "round_trip_ok": sum(round_trips(tokenizer, t) for t in probes),
        "round_trip_probes": len(probes),
        "file_bytes": args.out.stat().st_size,
    }
    for key, value in figures.items():
        print(f"{key:<18} {value}")
    print(json.dumps(figures))
    if figures["round_trip_ok"] != figures["round_trip_probes"]:
        raise SystemExit("decode(encode(text)) != text for some probe")


if __name__ == "__main__":
    main()
