"""Build the shipped sample corpus from real text (Debian documentation and licences).

    python -m pipeline.tools.make_sample --out sample

The sample mixes every input format in nested folders and plants what the pipeline must handle:
exact duplicates (also differing only in whitespace or Unicode normalisation form), near
duplicates (word-level edits, some chained), a few bad records and files a lister must skip.
What was planted is written to `_planted.json` (ground truth) and summarised in README.md.
Same machine contents + same seed -> byte-identical output.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.text import derived_id, normalize
from pipeline.tools import sample_io, sample_truth
from pipeline.tools.real_text import (
    DOC_ROOT,
    LICENSE_ROOT,
    RealText,
    classify_doc_file,
    iter_documents,
    list_files,
    mutate_words,
)

SEED = 20240501
EXACT_DUPLICATE_RATE = 0.05
NEAR_DUPLICATE_RATE = 0.06
CHAINED_NEAR_SHARE = 0.25  # near copies that get a second-generation copy of their own
MIN_NEAR_WORDS = 150  # a few % of edits on a shorter text is only a handful of words
UNIT_TARGET_BYTES = {"changelog": 3_000}  # a few changelog entries per document
DEFAULT_TARGET_BYTES = 8_000
PROSE_SUFFIXES = (".txt", ".md", ".rst")
KEPT_FOLDER = "crawl"  # sample/crawl: built from this sample by tools/make_crawl_sample.py


@dataclass(frozen=True)
class Container:
    path: str  # relative path; for fmt "txt" a folder holding one file per document
    fmt: str  # jsonl (also .gz/.zst/.ndjson by suffix) | parquet | txt
    kinds: tuple[str, ...]
    target_bytes: int
    id_style: str | None  # "str", "int" or None (ids are then derived by the reader)
    ensure_ascii: bool = False
    exhaust_kinds: tuple[str, ...] = ()  # kinds taken completely before the target applies


CONTAINERS = (
    Container("web/part-0000.jsonl", "jsonl", ("changelog",), 700_000, "str"),
    Container("web/2024/part-0001.jsonl.gz", "jsonl", ("changelog", "news"), 600_000, "str", True),
    Container("web/2024/05/part-0002.jsonl", "jsonl", ("other", "readme"), 300_000, "str"),
    Container("docs/part-0003.jsonl.zst", "jsonl", ("readme", "news", "other"), 700_000, "int"),
    Container(
        "licenses/part-0004.parquet", "parquet", ("copyright",), 800_000, "str", False, ("license",)
    ),
    Container("books", "txt", ("readme", "news"), 320_000, None),
    Container("forum/part-0005.ndjson", "jsonl", ("changelog",), 400_000, None),
)
EMPTY_FILES = ("web/part-0006.jsonl", "web/_SUCCESS", "docs/_SUCCESS")
HIDDEN_FILES = {".DS_Store": b"\x00\x00\x00\x01Bud1", "books/.DS_Store": b"\x00\x00\x00\x01Bud1"}
# (container, kind): where each bad record goes; well under 1 % of the records.
BAD_RECORDS = (
    ("web/part-0000.jsonl", "malformed_json"),
    ("web/2024/part-0001.jsonl.gz", "whitespace_text"),
    ("docs/part-0003.jsonl.zst", "missing_text"),
    ("forum/part-0005.ndjson", "numeric_text"),
)


@dataclass(eq=False)  # identity semantics: a Doc is one record, even if its text repeats
class Doc:
    text: object
    origin: str
    container: str
    role: str = "base"  # base | exact | near | bad
    parent: Doc | None = None
    detail: dict = field(default_factory=dict)
    source: str = ""  # filled when written
    row: int = -1
    doc_id: str | None = None


def sample_kind(path: Path) -> str:
    kind = classify_doc_file(path)
    if kind == "other" and not path.name.removesuffix(".gz").endswith(PROSE_SUFFIXES):
        return "skip"
    return kind


def unique_documents(stream: Iterator[RealText], seen: set[str]) -> Iterator[RealText]:
    """Drop natural exact duplicates so that every exact duplicate in the sample is planted."""
    for doc in stream:
        key = normalize(doc.text)
        if key not in seen:
            seen.add(key)
            yield doc


def document_streams(rng: random.Random) -> dict[str, Iterator[RealText]]:
    files_by_kind: dict[str, list[Path]] = {}
    for path in list_files(DOC_ROOT) + list_files(LICENSE_ROOT):
        files_by_kind.setdefault(sample_kind(path), []).append(path)
    seen: set[str] = set()
    streams = {}
    for kind, files in sorted(files_by_kind.items()):
        if kind != "license":  # every licence is used, in name order
            rng.shuffle(files)
        target = UNIT_TARGET_BYTES.get(kind, DEFAULT_TARGET_BYTES)
        stream = iter_documents(files, sample_kind, target, max_chunks_per_file=2)
        streams[kind] = unique_documents(stream, seen)
    return streams


def fill_containers(rng: random.Random) -> list[Doc]:
    streams = document_streams(rng)
    docs: list[Doc] = []
    for container in CONTAINERS:
        for kind in container.exhaust_kinds:
            docs.extend(Doc(d.text, d.origin, container.path) for d in streams[kind])
        kinds, size = list(container.kinds), 0
        while kinds and size < container.target_bytes:
            kind = rng.choice(kinds)
            real = next(streams[kind], None)
            if real is None:
                kinds.remove(kind)
                continue
            docs.append(Doc(real.text, real.origin, container.path))
            size += len(real.text.encode())
    return docs


def other_container(doc: Doc, rng: random.Random) -> str:
    return rng.choice([c.path for c in CONTAINERS if c.path != doc.container])


def exact_variant(text: str, variant: str) -> str:
    """A copy of text that differs (if at all) only in what normalisation removes."""
    if variant == "whitespace":
        return "\n  " + re.sub(r"(?<=\w) (?=\w)", "  ", text, count=40) + " \t\n\n"
    if variant == "crlf":
        return text.replace("\n", "\r\n")
    if variant == "unicode_form":
        nfd = unicodedata.normalize("NFD", text)
        return nfd if nfd != text else unicodedata.normalize("NFC", text)
    return text


def plant_exact_duplicates(base: list[Doc], rng: random.Random) -> list[Doc]:
    count = round(EXACT_DUPLICATE_RATE * len(base))
    # Unicode-form copies need text whose NFC and NFD differ (accented names are common here).
    composable = [d for d in base if unicodedata.normalize("NFD", d.text) != d.text]
    unicode_originals = rng.sample(composable, min(len(composable), max(2, count // 4)))
    rest = [d for d in base if d not in unicode_originals]
    plain_originals = rng.sample(rest, count - len(unicode_originals))
    plain_variants = ("identical", "whitespace", "crlf")
    plan = [(d, "unicode_form") for d in unicode_originals]
    plan += [(d, plain_variants[i % 3]) for i, d in enumerate(plain_originals)]
    copies = []
    for original, variant in plan:
        text = exact_variant(original.text, variant)
        assert normalize(text) == normalize(original.text)
        detail = {"variant": variant}
        copies.append(
            Doc(text, original.origin, other_container(original, rng), "exact", original, detail)
        )
    return copies


def near_copy(parent: Doc, rate: float, rng: random.Random) -> Doc:
    text = mutate_words(parent.text, rate, rng)
    while normalize(text) == normalize(parent.text):  # an edit undone by chance: edit again
        text = mutate_words(parent.text, rate, rng)
    detail = {"edit_rate": rate}
    return Doc(text, parent.origin, other_container(parent, rng), "near", parent, detail)


def plant_near_duplicates(base: list[Doc], used: set[Doc], rng: random.Random) -> list[Doc]:
    eligible = [d for d in base if d not in used and len(d.text.split()) >= MIN_NEAR_WORDS]
    originals = rng.sample(eligible, round(NEAR_DUPLICATE_RATE * len(base)))
    copies = []
    for original in originals:
        copy = near_copy(original, round(rng.uniform(0.01, 0.05), 3), rng)
        copies.append(copy)
        if rng.random() < CHAINED_NEAR_SHARE:  # A -> A' -> A'': a chain for clustering to handle
            copies.append(near_copy(copy, round(rng.uniform(0.01, 0.03), 3), rng))
    return copies


def bad_documents() -> list[Doc]:
    texts = {"whitespace_text": " \n\t  \n", "numeric_text": 4242}
    return [
        Doc(texts.get(kind), "", container, "bad", detail={"bad": kind})
        for container, kind in BAD_RECORDS
    ]


def record_id(container: Container, index: int, counter: list[int]) -> str | int | None:
    if container.id_style == "int":
        counter[0] += 1
        return 100_000 + counter[0]
    if container.id_style == "str":
        return f"{container.path.split('.')[0].replace('/', '-')}-{index:05d}"
    return None


def jsonl_record(doc: Doc, record_id_value) -> dict | sample_io.RawLine:
    record = {} if record_id_value is None else {"id": record_id_value}
    bad = doc.detail.get("bad")
    if bad == "malformed_json":  # a line cut short, as a crashed writer leaves it
        return sample_io.RawLine(json.dumps(record | {"text": "Package: truncated"})[:-2])
    if bad == "missing_text":
        return record | {"body": "this record carries its text under another key"}
    record["text"] = doc.text
    if doc.origin:
        record["meta"] = {"package": Path(doc.origin).parent.name, "file": Path(doc.origin).name}
    return record


def write_container(out: Path, container: Container, docs: list[Doc], counter: list[int]):
    target = out / container.path
    if container.fmt == "txt":
        target.mkdir(parents=True, exist_ok=True)
        for index, doc in enumerate(docs):
            slug = re.sub(r"[^A-Za-z0-9]+", "-", Path(doc.origin).parent.name)[:40]
            doc.source, doc.row = f"{container.path}/{index:04d}-{slug}.txt", 0
            (out / doc.source).write_bytes(doc.text.encode())
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    ids = [record_id(container, index, counter) for index in range(len(docs))]
    if container.fmt == "parquet":
        packages = [Path(d.origin).parent.name for d in docs]
        columns = {"id": ids, "text": [d.text for d in docs], "package": packages}
        sample_io.write_parquet(target, columns, row_group_size=128)
        rows = range(len(docs))
    else:
        records = [jsonl_record(d, i) for d, i in zip(docs, ids, strict=True)]
        data, rows = sample_io.encode_jsonl(records, container.ensure_ascii)
        target.write_bytes(sample_io.compress_for(target.name, data))
    for doc, row, id_value in zip(docs, rows, ids, strict=True):
        doc.source, doc.row = container.path, row
        doc.doc_id = None if id_value is None else str(id_value)


def write_sample(out: Path, docs: list[Doc], rng: random.Random) -> None:
    if out.exists():  # the crawl sample (tools/make_crawl_sample.py) lives beside it: kept
        for child in out.iterdir():
            if child.name == KEPT_FOLDER:
                continue
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    counter = [0]
    for container in CONTAINERS:
        members = [d for d in docs if d.container == container.path]
        rng.shuffle(members)  # copies sit among the originals, not after them
        write_container(out, container, members, counter)
    for name in EMPTY_FILES:
        (out / name).write_bytes(b"")
    for name, content in HIDDEN_FILES.items():
        (out / name).write_bytes(content)
    for doc in docs:
        if doc.doc_id is None and doc.detail.get("bad") != "malformed_json":
            doc.doc_id = derived_id(doc.source, doc.row)


def build(out: Path, seed: int) -> dict:
    rng = random.Random(seed)
    base = fill_containers(rng)
    exact = plant_exact_duplicates(base, rng)
    near = plant_near_duplicates(base, {d.parent for d in exact}, rng)
    docs = base + exact + near + bad_documents()
    write_sample(out, docs, rng)
    truth = sample_truth.ground_truth(docs, EMPTY_FILES, tuple(HIDDEN_FILES))
    (out / "_planted.json").write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n")
    summary = sample_truth.summarize(out, docs, [c.path for c in CONTAINERS])
    (out / "README.md").write_text(sample_truth.readme(summary, truth, seed))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("sample"))
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    summary = build(args.out, args.seed)
    print(sample_truth.format_table(summary))
    print(json.dumps(summary["totals"]))


if __name__ == "__main__":
    main()
