"""Where dedup's compiled loops (text_kernel.py, xxh3_kernel.py, minhash_kernel.py) are kept on
disk, and their compile done once per machine rather than once per process or per checkout.

numba's own cache (cache=True) keys its folder on the source file's *path* (next to the file,
or under NUMBA_CACHE_DIR), so a new checkout, a reinstall or a Ray job's working dir at a new
path compiles again: ~25 s of one core. Here the folder is keyed on the file's *content*:
`<root>/numba/<stem>-<sha256 of the file, 16 hex>`, with root $PIPELINE_CACHE_DIR, else
$XDG_CACHE_HOME/pipeline, else ~/.cache/pipeline. Every process on a machine (the driver, any
job's workers) finds the same entries; an edit to a kernel file gets a new folder. numba still
checks each entry against the file's content hash, the signature and the CPU.

Compiling takes `compiling()`, an exclusive lock (fcntl, reentrant within a process) in that
folder: workers that start together wait for the first one and load what it wrote instead of
compiling the same loops side by side. `warm_in_background()` starts that compile in a child
process (warm_kernels.py) when a run starts, so that it overlaps Ray's start, with the loops of
the run's curation steps (curate/warm.py); `ready()` says whether this machine has already done
it (a marker written after a full compile).

Each module of compiled loops (dedup/text_kernel.py, xxh3_kernel.py, minhash_kernel.py,
curate/ngram_kernel.py, stats_kernel.py, lid_kernel.py) calls `install_locator()` before its first
njit; only files of the pipeline package are located here, and numba caches other libraries as
usual. A module whose loops call another file's (lid_kernel.py calls lid_ops.py's, text_kernel.py
xxh3_kernel.py's) names it with `key_also`: its folder is keyed on both, since numba does not see
a change in the file it calls.
Where numba's locator hook is missing, its default cache is used (slower, same results).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/
_KERNELS = (  # and nfc.py: text_kernel.py compiles its constants in
    "dedup/text_kernel.py",
    "dedup/xxh3_kernel.py",
    "dedup/minhash_kernel.py",
    "dedup/nfc.py",
)


def cache_root() -> Path:
    """The user's pipeline cache folder; its `numba` subfolder holds the compiled loops."""
    if root := os.environ.get("PIPELINE_CACHE_DIR"):
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pipeline"


def numba_dir() -> Path:
    return cache_root() / "numba"


_KEYED_ALSO: dict[Path, tuple[Path, ...]] = {}


def key_also(py_file: str, *names: str) -> None:
    """Key the folder of `py_file`'s loops on these files next to it as well: numba keeps a
    compiled function whose own file is unchanged even when a function it calls, from another
    file, has changed. Called before the file's first njit."""
    path = Path(py_file).resolve()
    _KEYED_ALSO[path] = tuple(path.parent / name for name in names)


def _content_key(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes())
    for other in _KEYED_ALSO.get(path.resolve(), ()):
        digest.update(other.read_bytes())
    return digest.hexdigest()[:16]


def _ready_marker(step: str | None = None) -> Path:
    """Dedup's marker is named after both kernel files, numba's version and Python's; a
    curation step's after its name, those versions and the content of pipeline/curate/: any
    change, a new marker. numba's version from its metadata: a run's driver asks without
    importing numba (~0.5 s)."""
    digest = hashlib.sha256(f"{importlib.metadata.version('numba')} {sys.version}".encode())
    if step is None:
        for name in _KERNELS:
            digest.update((_PACKAGE / name).read_bytes())
        return numba_dir() / f"ready-{digest.hexdigest()[:16]}"
    digest.update(step.encode())
    digest.update(_curate_sources())
    return numba_dir() / f"ready-{step}-{digest.hexdigest()[:16]}"


@functools.lru_cache(maxsize=1)
def _curate_sources() -> bytes:
    """The digest of pipeline/curate/'s files, read once per process (every step's marker
    is named after it)."""
    digest = hashlib.sha256()
    for path in sorted((_PACKAGE / "curate").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.digest()


def ready(steps: tuple[str, ...] = ()) -> bool:
    """Whether this machine has compiled the current dedup kernels (warm_kernels.py finished
    here), and those of each curation step in `steps`."""
    try:
        return all(_ready_marker(step).exists() for step in (None, *steps))
    except importlib.metadata.PackageNotFoundError:  # no numba: nothing to compile
        return True


_held = threading.local()
_in_process = threading.RLock()


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Hold the machine-wide compile lock (reentrant in this process). Where the cache folder
    cannot be written, no lock: each process compiles for itself, as numba would."""
    with _in_process:
        depth = getattr(_held, "depth", 0)
        if depth:
            _held.depth = depth + 1
            try:
                yield
            finally:
                _held.depth -= 1
            return
        try:
            numba_dir().mkdir(parents=True, exist_ok=True)
            lock = open(numba_dir() / ".lock", "a")  # noqa: SIM115 - closed below
        except OSError:
            lock = None
        try:
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            _held.depth = 1
            yield
        finally:
            _held.depth = 0
            if lock is not None:
                lock.close()  # releases the flock


def mark_ready(steps: tuple[str, ...] = ()) -> None:
    """After dedup's kernels and those of `steps` compiled (dedup/warm_kernels.py): `ready` is
    True for them from now on."""
    numba_dir().mkdir(parents=True, exist_ok=True)
    for step in (None, *steps):
        _ready_marker(step).touch()


def warm_in_background(steps: tuple[str, ...] = ()) -> subprocess.Popen | None:
    """A child process that compiles every dedup kernel and those of the curation `steps`
    (dedup/warm_kernels.py), or None when they are already compiled here (or numba is
    missing). The caller ends it with `finish`."""
    if ready(steps):
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.dedup.warm_kernels", *steps],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def hurry(child: subprocess.Popen | None) -> None:
    """Once Ray is up, the workers wait for the compile: its child back to this process's
    priority (it starts at nice 10, behind Ray's start), where the OS lets it be raised (that
    takes CAP_SYS_NICE; otherwise it stays at nice 10)."""
    if child is not None:
        with contextlib.suppress(OSError):  # gone already, or not allowed
            os.setpriority(os.PRIO_PROCESS, child.pid, os.getpriority(os.PRIO_PROCESS, 0))


def finish(child: subprocess.Popen | None) -> None:
    """Stop the warming child if it still runs (a compile cut short leaves no partial entry:
    numba writes each one to a temporary file and renames it)."""
    if child is not None:
        if child.poll() is None:
            child.terminate()
        child.wait()


def install_locator() -> None:
    """Cache this package's compiled loops in the content-keyed folder. Called by each module
    of njit functions before its first one (numba picks a function's cache folder when it is
    decorated); idempotent. Not done on import: a driver that only asks `ready()` does not
    import numba."""
    try:
        from numba.core import caching
    except ImportError:
        return

    class _ContentKeyedLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        """numba's locator for this package's files: the folder named after the content."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            path = Path(py_file)
            self._cache_path = str(numba_dir() / f"{path.stem}-{_content_key(path)}")

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            try:
                inside = Path(py_file).resolve().is_relative_to(_PACKAGE)
            except OSError:
                return None
            return super().from_function(py_func, py_file) if inside else None

    classes = getattr(getattr(caching, "CacheImpl", None), "_locator_classes", None)
    if isinstance(classes, list) and not any(c.__name__ == "_ContentKeyedLocator" for c in classes):
        classes.insert(0, _ContentKeyedLocator)
