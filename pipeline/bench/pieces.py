"""Proof on long real texts: long documents encoded in pieces (tokens/pieces.py) give exactly
the ids of the whole document, with the shipped tokenizer and a GPT-4-regex (cl100k) BPE of
100k trained here, with both engines.

    python -m pipeline bench pieces [--train-mb 32] [--vocab 100000] [--doc-mb 15] [--docs 2]

Real text: the machine's documentation, licences and man pages (tools/real_text.py). The BPE is
trained on `--train-mb` of it (tokenizers' BpeTrainer, cl100k split regex, byte-level); the
documents are `--docs` consecutive `--doc-mb` MB stretches of the same text. Each is encoded whole
and through `encode_flat` (cut in pieces); one line per (tokenizer, engine, document) and a JSON
last line. Takes about 3 minutes and ~3 GB (tokenizers encoding a 15 MB document whole).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from pipeline.cli import args as cli_args
from pipeline.tokens import pieces
from pipeline.tokens.encode import EngineUnavailable, FastokensEncoder, TokenizersEncoder
from pipeline.tools import real_text

REPO = Path(__file__).resolve().parents[2]


def real_documents(chars: int) -> list[str]:
    files = [
        *real_text.list_files(real_text.DOC_ROOT),
        *real_text.list_files(real_text.LICENSE_ROOT),
        *real_text.list_files(real_text.MAN_ROOT),
    ]
    docs, size = [], 0
    for doc in real_text.iter_documents(files, real_text.classify_doc_file, 30_000):
        docs.append(doc.text)
        size += len(doc.text)
        if size > chars:
            break
    return docs


def cl100k_bpe(docs: list[str], vocab: int) -> bytes:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pieces.CL100K_PATTERN), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer)
    return tok.to_str().encode()


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.Parser(
        prog="python -m pipeline bench pieces", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--train-mb", type=float, default=32, help="MB of real text the test BPE is trained on"
    )
    p.add_argument("--vocab", type=int, default=100_000, help="the test BPE's vocabulary size")
    p.add_argument("--doc-mb", type=float, default=15, help="size of each giant document, MB")
    p.add_argument("--docs", type=int, default=2, help="giant documents encoded both ways")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    docs = real_documents(int(args.train_mb * 2**20))
    bpe = cl100k_bpe(docs, args.vocab)
    print(
        f"cl100k BPE: vocab {Tokenizer.from_str(bpe.decode()).get_vocab_size()}, trained on"
        f" {sum(map(len, docs)) / 2**20:.1f} M characters ({time.perf_counter() - start:.0f} s)"
    )
    joined, width = "\n\n".join(docs), int(args.doc_mb * 2**20)
    longs = [joined[i * width : (i + 1) * width] for i in range(args.docs)]
    longs = [t for t in longs if t]
    rows, identical = [], True
    tokenizers_ = (("cl100k-bpe", bpe), ("shipped", (REPO / "configs/tokenizer.json").read_bytes()))
    for name, raw in tokenizers_:
        cut_before = pieces.can_cut(raw, True)
        for cls in (FastokensEncoder, TokenizersEncoder):
            try:
                enc = cls(raw)
            except EngineUnavailable as e:
                print(f"{name} {cls.name}: skipped ({e})")
                continue
            for j, text in enumerate(longs):
                whole = enc._encode([text])[0]
                ids, _ = enc.encode_flat([text])
                same = bool(np.array_equal(whole, ids))
                identical &= same
                cuts = len(pieces.cut_points(text, cut_before)) if cut_before else 0
                rows.append(
                    {
                        "tokenizer": name,
                        "engine": cls.name,
                        "doc": j,
                        "cuts": cuts,
                        "tokens": len(whole),
                        "identical": same,
                    }
                )
                print(
                    f"{name:<11} {cls.name:<10} document {j}: {len(text) / 2**20:.1f} MB,"
                    f" {cuts} cuts, {len(whole):,} tokens, identical {same}"
                )
    print(json.dumps({"identical": identical, "runs": rows}))
