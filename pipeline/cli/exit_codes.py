"""The exit codes of `python -m pipeline`: one table, used by the exceptions that carry them,
by `--help` (cli/main.py, cli/run_commands.py) and by the documentation.

A command prints one line naming the problem on stderr before it exits with a code above 0.
"""

from __future__ import annotations

DONE = 0
VERIFY_FAILED = 1
CONFIG_ERROR = 2
RUN_STOPPED = 3
LEASE_HELD = 4
STORAGE_UNREACHABLE = 5
STORAGE_REFUSED = 6
NOT_FOUND = 7
VERSION_BROKEN = 8
CLOSED_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool whose reader went away

EXIT_CODES: dict[int, str] = {
    DONE: "done",
    VERIFY_FAILED: "verify found a mismatch (or `retain --apply` an action that failed)",
    CONFIG_ERROR: "configuration error: the key and the file are named; nothing written",
    RUN_STOPPED: "the run stopped on purpose (too many bad records, accounting broken, a shard"
    " `verify` would reject; `remove`: the token files it re-packs are gone; `run` or `remove`:"
    " a takedown list entry lost or edited by hand; `run` or `remove`"
    " without `--allow-empty`: an input, a source or a version that yields no document, a"
    " source of the newest version renamed, dropped or shrunk by more than"
    " run.max_input_shrink); nothing committed",
    LEASE_HELD: "another run holds the dataset's lease (`remove` waits up to `--wait` seconds"
    " first)",
    STORAGE_UNREACHABLE: "storage unreachable: the endpoint accepts no connection (the line"
    " names the endpoint and the object)",
    STORAGE_REFUSED: "the store refused: no credentials, access denied, an unknown key, no such"
    " bucket (the line names the URI and the cause)",
    NOT_FOUND: "`find`: the version does not hold the id",
    VERSION_BROKEN: "`find`, `blend`: the version's manifest or document index fails its checks"
    " (`verify` names them all); `find`: the dataset's newest version holds a taken-down id",
    CLOSED_PIPE: "stdout was closed before the output was written (e.g. `| head`): the rest is"
    " dropped, quietly",
}


def exit_codes_help() -> str:
    """The table as `--help` prints it (an argparse epilog, one code a line)."""
    return "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
