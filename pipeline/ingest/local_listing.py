"""Listing a local input folder: the symlink and file-name policy, in one place.

Object stores have neither links nor undecodable names; a local folder has both. The policy:

- A symlink whose target lies inside the input root (after resolving every link) is followed,
  file or folder, and listed under the link's own path (a second path to the same bytes is
  removed later as an exact duplicate). A folder link whose target is the link's own folder or
  one of its ancestors is not followed: reason ``symlink_loop``.
- A symlink whose target lies outside the input root is never followed: reason
  ``symlink_outside_input``; neither its target's name nor its size is recorded.
- A symlink whose target does not exist: reason ``dangling_symlink``.
- A name that is not valid UTF-8 (the listing, input manifest and quarantine are UTF-8):
  reason ``non_utf8_name``, recorded with the name escaped (``caf\\xe9.txt``); a folder with
  such a name is walked and each file under it is recorded so, so nothing goes unmentioned.
- Anything that is neither a regular file nor a folder (a FIFO, a socket, a device):
  reason ``not_a_regular_file``.

Sizes and mtimes are those of the target; callers sort the entries.

A local file also gets a cheap content fingerprint, ``head_tail_xxh3``: xxh3_128 (hex) of its
first and last 64 KiB, or of its whole content when it holds at most 128 KiB (two small reads,
never the whole of a large file). With size and mtime it says whether a file is still the one
listed even after a same-size rewrite whose old mtime was put back (``cp -p``, ``rsync -t``); a
change that touches only bytes past the first and before the last 64 KiB goes unseen.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import xxhash

SYMLINK_OUTSIDE_INPUT = "symlink_outside_input"
SYMLINK_LOOP = "symlink_loop"
DANGLING_SYMLINK = "dangling_symlink"
NON_UTF8_NAME = "non_utf8_name"
NOT_A_REGULAR_FILE = "not_a_regular_file"
HEAD_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class LocalEntry:
    rel: str  # '/'-separated, relative to the root; escaped where not UTF-8
    size: int
    mtime: float | None
    reason: str | None  # None: a regular file to consider; else why it is skipped


def _escaped(name: str) -> tuple[str, bool]:
    """(printable UTF-8 name, whether it was valid UTF-8)."""
    try:
        name.encode("utf-8")
        return name, True
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace"), False


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def head_tail_xxh3(path: str, size: int) -> str | None:
    """The fingerprint above of the file at `path`, `size` bytes long as listed; None when it
    cannot be read (a reader of the file then reports why; retention leaves it alone)."""
    digest = xxhash.xxh3_128()
    try:
        with open(path, "rb") as f:
            if size <= 2 * HEAD_TAIL_BYTES:
                digest.update(f.read(size))
            else:
                digest.update(f.read(HEAD_TAIL_BYTES))
                f.seek(size - HEAD_TAIL_BYTES)
                digest.update(f.read(HEAD_TAIL_BYTES))
    except OSError:
        return None
    return digest.hexdigest()


def walk_local(root: str) -> Iterator[LocalEntry]:
    """Every entry under the folder `root`, with the policy above applied."""
    real_root = os.path.realpath(root)
    # (folder path, its '/'-joined relative path, real paths of it and its ancestors, name ok)
    stack = [(root, "", (real_root,), True)]
    while stack:
        folder, rel_dir, ancestors, names_ok = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except NotADirectoryError:
            continue
        subfolders = []
        for entry in entries:
            name, ok = _escaped(entry.name)
            rel = rel_dir + name
            bad_name = not (ok and names_ok)
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if not os.path.exists(target):
                    yield LocalEntry(rel, 0, None, DANGLING_SYMLINK)
                    continue
                if not _inside(target, real_root):
                    yield LocalEntry(rel, 0, None, SYMLINK_OUTSIDE_INPUT)
                    continue
                if os.path.isdir(target) and target in ancestors:
                    yield LocalEntry(rel, 0, None, SYMLINK_LOOP)
                    continue
            if entry.is_dir(follow_symlinks=True):
                real = os.path.realpath(entry.path)
                subfolders.append((entry.path, rel + "/", (*ancestors, real), not bad_name))
                continue
            st = entry.stat(follow_symlinks=True)
            if not entry.is_file(follow_symlinks=True):
                yield LocalEntry(rel, 0, None, NOT_A_REGULAR_FILE)
            else:
                reason = NON_UTF8_NAME if bad_name else None
                yield LocalEntry(rel, st.st_size, st.st_mtime, reason)
        stack.extend(subfolders)
