"""Done markers: a task's result as JSON, written after the output it describes, so that a rerun
of the same task reuses that output instead of redoing it (resume).

A marker is the JSON of a result dataclass's fields (run/results.py): the read task's
(`ReadResult.marker()`: its own fields, then seconds, io and peak_rss_mb) and the two exchanges'
pass 1 (`RegroupResult`, `ExchangeResult`: their own fields). It is validated against that
dataclass on read (pydantic): a marker that does not parse or validate (cut short, edited by
hand, written by an incompatible version) proves nothing, so the task redoes its work and
writes it again, with a warning naming the marker and the field. Keys a result no longer has
are ignored; missing ones take the field's default, or fail validation when it has none.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from pipeline.core.storage import Location
from pipeline.run.results import TaskResult

T = TypeVar("T", bound=TaskResult)


@functools.cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def load_marker(done: Location, cls: type[T], **overrides: Any) -> T | None:
    """The result a done marker holds (`overrides` replace fields, e.g. reused=True); None when
    there is no marker, or one that does not validate (the caller redoes the work)."""
    if not done.exists():  # a HEAD, as every done check makes (the request counts assume it)
        return None
    try:
        fields = json.loads(done.read_bytes())
        if not isinstance(fields, dict):
            raise ValueError(f"a JSON {type(fields).__name__}, not an object")
        return _adapter(cls).validate_python({**fields, **overrides})
    except ValidationError as e:
        err = e.errors()[0]
        why = f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
    except ValueError as e:  # not JSON
        why = str(e)
    print(f"warning: ignoring done marker {done.uri} ({why}); redoing its task", file=sys.stderr)
    return None


def write_marker(done: Location, fields: dict[str, Any]) -> None:
    """Written last, after the output it describes: a marker is whole or absent."""
    done.write_bytes(json.dumps(fields).encode())
