"""Every bad command-line argument is one line on stderr and exit 2 (cli_args.py): paths that
are files where a folder is expected and the other way round, missing files, numbers that are
0, negative, NaN, inf, huge or not numbers, and a --rates file that is not JSON."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from support import REPO, SAMPLE_CONFIG
from support.cli import call

from pipeline import cli

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
ZERO_IS_BAD = {"0"}
ZERO_IS_FINE = {"--runs-per-month", "--epochs"}  # no run, no training read this month


def number_cases():
    for where in NUMBERS:
        bad = NEGATIVE_IS_BAD + ([] if where.split()[-1] in ZERO_IS_FINE else sorted(ZERO_IS_BAD))
        for value in bad:
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


def test_good_numbers_still_pass(tmp_path: Path):
    code, out, err = call(["plan", "--latency-ms", "20", "--bandwidth-mbps", "50", "--nodes", "2"])
    assert code == 0 and "request" in out.lower(), err
    code, out, err = call(
        ["plan", "--corpus-bytes", "1TB", "--docs", "5", "--json", str(tmp_path / "p.json")]
    )
    assert code == 0 and (tmp_path / "p.json").exists(), err
