"""Every bad command-line argument is one line on stderr and exit 2 (cli/args.py): paths that
are files where a folder is expected and the other way round, missing files, numbers that are
0, negative, NaN, inf, huge or not numbers, and a --rates file that is not JSON; and the bad
inputs behind them (test_bad_inputs_are_one_line_and_exit_2): files and names that are not
UTF-8, YAML that does not parse, a single file given as the input folder, a run id that names
no run, a benchmark's own options."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from support import REPO, SAMPLE_CONFIG
from support.cli import call

from pipeline.cli import main as cli

FILE = str(REPO / "README.md")
FOLDER = str(REPO / "configs")
MISSING = str(REPO / "no-such-file")
CONFIG = str(SAMPLE_CONFIG)

NUMBERS = {  # (command and option, a value that is fine), each given every bad value below
    "plan --latency-ms": "50",
    "plan --bandwidth-mbps": "100",
    "plan --target-gbps": "2",
    "plan --nodes": "1",
    "plan --gpus-per-node": "8",
    "plan --tokens-per-s-per-gpu": "1000",
    "plan --bytes-per-token": "2",
    "plan --corpus-bytes 1TB --docs": "5",
    "plan --corpus-bytes": "10TB",
    "plan --corpus-bytes 1TB --unit-bytes": "1MiB",
    "plan --corpus-bytes 1TB --shard-bytes": "1MiB",
    "plan --corpus-bytes 1TB --file-bytes": "1GiB",
    f"report --config {CONFIG} --runs-per-month": "1",
    f"report --config {CONFIG} --epochs": "1",
    f"report --config {CONFIG} --range-bytes": "1000",
    f"report --config {CONFIG} --corpus-bytes": "10TB",
}
NEGATIVE_IS_BAD = ["-5", "nan", "inf", "1e30", "abc", ""]
RATIOS = ["plan --corpus-bytes 1TB --token-ratio", "plan --corpus-bytes 1TB --stored-ratio"]
ZERO_IS_BAD = {"0"}
ZERO_IS_FINE = {"--runs-per-month", "--epochs"}  # no run, no training read this month


def number_cases():
    for where in NUMBERS:
        bad = NEGATIVE_IS_BAD + ([] if where.split()[-1] in ZERO_IS_FINE else sorted(ZERO_IS_BAD))
        for value in bad:
            yield pytest.param([*where.split(), value], id=f"{where.split()[-1]} {value!r}")
    for where in RATIOS:  # were plain floats: -1 planned "-1.8TB written", exit 0
        for value in ["-1", "0", "nan", "inf", "1e30", "1e15"]:  # 1e15: 2e24 TB written
            yield pytest.param([*where.split(), value], id=f"{where.split()[-1]} {value!r}")


PATHS = {
    "run --config DIR": ["run", "--config", FOLDER],
    "run --config missing": ["run", "--config", MISSING],
    "run --output FILE": ["run", "--config", CONFIG, "--output", FILE],
    "retain --config DIR": ["retain", "--config", FOLDER],
    "report --json DIR": ["report", "--config", CONFIG, "--json", FOLDER],
    "report --html in a missing folder": ["report", "--config", CONFIG, "--html", MISSING + "/x"],
    "report --stats missing": ["report", "--config", CONFIG, "--stats", MISSING],
    "report --reader-stats DIR": ["report", "--config", CONFIG, "--reader-stats", FOLDER],
    "retain --export-lifecycle DIR": ["retain", "--config", CONFIG, "--export-lifecycle", FOLDER],
    "plan --rates missing": ["plan", "--corpus-bytes", "1TB", "--rates", MISSING],
    "plan --rates DIR": ["plan", "--corpus-bytes", "1TB", "--rates", FOLDER],
    "plan --json DIR": ["plan", "--corpus-bytes", "1TB", "--json", FOLDER],
    "plan --probe missing": ["plan", "--probe", MISSING],
    "plan --config DIR": ["plan", "--corpus-bytes", "1TB", "--config", FOLDER],
    "verify FILE": ["verify", FILE],
    "verify --config DIR": ["verify", FOLDER, "--config", FOLDER],
    "find FILE": ["find", FILE, "--id", "x"],
    "blend FILE": ["blend", FILE],
    "remove --ids DIR": ["remove", FOLDER, "--ids", FOLDER],
    "remove --ids missing": ["remove", FOLDER, "--ids", MISSING],
    "plan --rates not JSON": ["plan", "--corpus-bytes", "1TB", "--rates", FILE],
}


@pytest.fixture(autouse=True)
def one_parser(monkeypatch):
    """The parser built once for all cases (40 ms a build)."""
    monkeypatch.setattr(cli, "build_parser", _PARSER)


_PARSER = functools.cache(cli.build_parser)




@pytest.mark.parametrize("argv", list(number_cases()))
def test_a_bad_number_is_one_line_and_exit_2(argv):
    code, out, err = call(argv)
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and argv[-2] in err, err


@pytest.mark.parametrize("case", sorted(PATHS))
def test_a_bad_path_is_one_line_and_exit_2(case):
    code, out, err = call(PATHS[case])
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


NOT_UTF8 = "\udcff\udcfe"  # the bytes ff fe as Python keeps them from argv or a file name


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, str]:
    """Inputs that are not what they claim: files of Latin-1 bytes, YAML that does not parse, a
    folder whose name is not UTF-8 (holding a good JSONL file), a single JSONL file."""
    root = tmp_path_factory.mktemp("bad")
    (root / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    (root / "syntax.yaml").write_bytes(b"name: x\noutput:\n  uri: out\n  bad: : [\n")
    (root / "quote.yaml").write_bytes(b'name: "x\nother: 1\n')  # PyYAML said it in 8 lines
    (root / "reader.json").write_bytes(b'{"epochs": 1, "note": "caf\xe9"}')
    (root / "reader_nan.json").write_bytes(b'{"epochs": 0, "bytes_read": NaN}')
    (root / "config.json").write_bytes(b'{"name": "x"}')
    (root / "empty").mkdir()
    folder = os.path.join(str(root), "in-" + NOT_UTF8)
    os.mkdir(folder)
    (Path(folder) / "a.jsonl").write_text('{"id": "1", "text": "hello"}\n')
    return {
        "latin1": str(root / "latin1.yaml"),
        "syntax": str(root / "syntax.yaml"),
        "quote": str(root / "quote.yaml"),
        "reader": str(root / "reader.json"),
        "reader_nan": str(root / "reader_nan.json"),
        "config_json": str(root / "config.json"),
        "empty": str(root / "empty"),
        "folder": folder,
        "jsonl": str(REPO / "sample" / "web" / "part-0000.jsonl"),
        "out": str(root / "out"),
    }


BAD_INPUTS = {  # case: (argv with {placeholders} from `bad`, a word the one line must hold)
    "run --config latin-1": ("run --config {latin1}", "not UTF-8"),
    "plan --config latin-1": ("plan --corpus-bytes 1TB --config {latin1}", "not UTF-8"),
    "run --config YAML error": ("run --config {syntax}", "line 4, column 8"),
    "plan --config YAML error": ("plan --corpus-bytes 1TB --config {syntax}", "line 4, column 8"),
    "verify --config YAML error": (f"verify {FOLDER} --config {{syntax}}", "line 4, column 8"),
    "retain --config YAML error": ("retain --config {syntax}", "line 4, column 8"),
    "run --config unclosed quote": ("run --config {quote}", "line 3, column 1"),
    "run --input FILE --dry-run": (
        f"run --config {CONFIG} --input {{jsonl}} --dry-run",
        "is a file, not a folder",
    ),
    "run --set input.uri=FILE": (
        f"run --config {CONFIG} --set input.uri={{jsonl}} --dry-run",
        "is a file, not a folder",
    ),
    "curate-preview --input FILE": (
        f"curate-preview --config {CONFIG} --input {{jsonl}}",
        "is a file, not a folder",
    ),
    "run --input non-UTF-8 folder": (
        f"run --config {CONFIG} --input {{folder}} --output {{out}} --dry-run",
        "not valid UTF-8",
    ),
    "run --output non-UTF-8 folder": (
        f"run --config {CONFIG} --output {{folder}}/out --dry-run",
        "not valid UTF-8",
    ),
    "find --id non-UTF-8": (f"find {FOLDER} --id {NOT_UTF8}", "not valid UTF-8"),
    "remove --reason non-UTF-8": (
        f"remove {FOLDER} --ids {FILE} --reason {NOT_UTF8}",
        "not valid UTF-8",
    ),
    "takedown-lift --entry non-UTF-8": (
        f"takedown-lift {FOLDER} --entry {NOT_UTF8} --reason x",
        "not valid UTF-8",
    ),
    "report --reader-stats latin-1": (
        f"report --config {CONFIG} --output {{out}} --reader-stats {{reader}}",
        "not UTF-8",
    ),
    "report --reader-stats NaN": (
        f"report --config {CONFIG} --output {{out}} --reader-stats {{reader_nan}}",
        "epochs",
    ),
    "report --run-id nosuch": (
        f"report --config {CONFIG} --output {{out}} --run-id nosuch",
        "nosuch",
    ),
    "--set dedup.partitions huge": (
        f"run --config {CONFIG} --output {{out}} --dry-run"
        " --set dedup.partitions=99999999999999999999",
        "dedup.partitions",
    ),
    "--set retention.grace_days .inf": (
        f"run --config {CONFIG} --output {{out}} --dry-run --set retention.grace_days=.inf",
        "retention.grace_days",
    ),
    "--set dedup.near.bands above num_perm": (
        f"run --config {CONFIG} --output {{out}} --dry-run --set dedup.near.bands=64",
        "bands x rows",
    ),
    "plan 1EiB in 1 GiB files": ("plan --corpus-bytes 1EiB", "--file-bytes"),
    "plan tiny units": ("plan --corpus-bytes 1TB --unit-bytes 1", "--unit-bytes"),
    "plan more documents than bytes": ("plan --corpus-bytes 1MB --docs 2000000", "--docs"),
    "report --corpus-bytes 1EiB": (
        f"report --config {CONFIG} --output {{out}} --corpus-bytes 1EiB",
        "--file-bytes",
    ),
    "report --reader-stats not counters": (
        f"report --config {CONFIG} --output {{out}} --reader-stats {{config_json}}",
        "bytes_read",
    ),
    "--endpoint-url non-UTF-8": (f"verify {FOLDER} --endpoint-url {NOT_UTF8}", "not valid UTF-8"),
    "--set storage.retries=0 without --config": (
        f"verify {FOLDER} --set storage.retries=0",
        "storage.retries",
    ),
    "--set unclosed bracket": (f"run --config {CONFIG} --dry-run --set name=[x", "name"),
    "plan --probe a folder": ("plan --probe {empty}", "--probe"),
    "bench minhash unknown option": ("bench minhash --nosuch", "--input"),
    "bench listing unknown option": ("bench listing --files -5x", "--files"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_inputs_are_one_line_and_exit_2(case, bad):
    """Each was a traceback (exit 1), several lines, or exit 0 with a wrong result before."""
    argv, word = BAD_INPUTS[case]
    code, out, err = call([arg.format(**bad) for arg in argv.split()])
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and word in err, err
    assert not os.path.exists(bad["out"])


def test_good_numbers_still_pass(tmp_path: Path):
    code, out, err = call(["plan", "--latency-ms", "20", "--bandwidth-mbps", "50", "--nodes", "2"])
    assert code == 0 and "request" in out.lower(), err
    code, out, err = call(
        ["plan", "--corpus-bytes", "1TB", "--docs", "5", "--json", str(tmp_path / "p.json")]
    )
    assert code == 0 and (tmp_path / "p.json").exists(), err
