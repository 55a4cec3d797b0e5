"""The argparse types of the command line: every number and local path an option takes is
checked here, so that a bad value is one line and exit 2 (argparse's usage error), never a
traceback or a silently wrong result later.

Text: valid UTF-8 where it is recorded or looked up (ids, reasons).
Numbers: finite (no nan/inf), in range (positive, or non-negative where 0 means something),
below `MAX_NUMBER` / `MAX_BYTES`. Sizes: `10TB`, `256MiB` or bytes, as the config reads them.
Local paths: an existing file where a file is read, not a folder where a file is written or
where a dataset folder is expected; a URI with a scheme (s3://) passes unchecked: its store
answers for it (exit 5 or 6).
"""

from __future__ import annotations

import argparse
import math
import os

from pipeline.core.units import parse_size

MAX_BYTES = 2**60  # 1 EiB: a size above it is a typo (or `1e30`), and overflows int64 sums
MAX_NUMBER = 1e15  # counts, rates and multipliers: far above any real cluster or corpus
MAX_RATIO = 10.0  # bytes per byte (token / text bytes at 2 B a token, stored / raw): at most ~2


def _number(text: str, kind: type, minimum: float, inclusive: bool) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    too_small = value < minimum if inclusive else value <= minimum
    if too_small:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
    if value > MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"{text!r} is above the maximum {MAX_NUMBER:g}")
    return value


def positive_float(text: str) -> float:
    return _number(text, float, 0, inclusive=False)


def non_negative_float(text: str) -> float:
    return _number(text, float, 0, inclusive=True)


def ratio(text: str) -> float:
    """A positive ratio of bytes to bytes, at most MAX_RATIO."""
    value = positive_float(text)
    if value > MAX_RATIO:
        raise argparse.ArgumentTypeError(f"{text!r} is above the maximum {MAX_RATIO:g}")
    return value


def positive_int(text: str) -> int:
    return int(_number(text, int, 1, inclusive=True))


def size(text: str) -> int:
    """A positive size in bytes, at most MAX_BYTES."""
    try:
        value = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 10TB, 256MiB)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0 bytes")
    if value > MAX_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is above the maximum of 1 EiB")
    return value


def utf8_text(text: str) -> str:
    """Text that is recorded or looked up as UTF-8 (document ids, reasons, run ids): an argument
    of other bytes (kept by Python as lone surrogates) can match nothing and be written nowhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:  # the argument's bytes, as \\x escapes
            shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate not from a byte (a call from Python)
            shown = text.encode("utf-8", "backslashreplace").decode()
        raise argparse.ArgumentTypeError(f'"{shown}" is not valid UTF-8') from None
    return text


def _local(text: str) -> str | None:
    """The local path of `text`, or None for a URI of a store (s3://...)."""
    if text.startswith("file://"):
        return text.removeprefix("file://")
    return None if "://" in text else text


def existing_file(text: str) -> str:
    """A file that is read: it exists and is not a folder."""
    path = _local(text)
    if path is not None:
        if os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
        if not os.path.exists(path):
            raise argparse.ArgumentTypeError(f"{text} does not exist")
    return text


def file_to_write(text: str) -> str:
    """A file that is written: not a folder, in a folder that exists."""
    path = _local(text)
    if path is not None:
        if os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise argparse.ArgumentTypeError(f"{text}: the folder {parent} does not exist")
    return text


def existing_path(text: str) -> str:
    """A file or folder that is read: it exists."""
    path = _local(text)
    if path is not None and not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return text


def folder(text: str) -> str:
    """A folder (the output, or a dataset or version folder): a local path must not be a file."""
    path = _local(text)
    if path is not None and os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder")
    return text


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage error is one line (the option and the problem), exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
