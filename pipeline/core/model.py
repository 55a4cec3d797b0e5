"""The base of every configuration model, and bounded value types for every numeric key.

Unknown keys are errors and values are frozen (StrictModel). Every number in the config
(pipeline/config/sections.py, pipeline/retention/policy.py, pipeline/report/prices.py) takes one
of these types, or a `Field` with explicit bounds, so that a value that cannot work (a size of
0, a negative seed, a fraction above 1, a count of 10^20, inf) is a configuration error naming
the key and the file (exit 2) before anything runs. tests/unit/test_config_values.py walks every
numeric key of the model and fails for one without a lower and an upper bound: a new key must
pick a type here. `python -m pipeline config` shows each key's range.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ByteSize, ConfigDict, Field


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Maxima: far above any real value, so that a typo (an extra digit, `1e30`, `.inf`) is refused
# on load rather than overflowing int64 sums, planning 10^20 tasks or pricing infinity.
MAX_BYTES = 2**60  # 1 EiB
MAX_COUNT = 1_000_000  # partitions, batch sizes, CPUs, versions kept
MAX_SEED = 2**63 - 1  # an int64 (Arrow, numpy) and a valid xxhash seed
MAX_DAYS = 100_000.0  # ~274 years
MAX_SECONDS = 86_400.0  # a day
MAX_PRICE = 1_000_000.0  # dollars per unit

Bytes = Annotated[ByteSize, Field(gt=0, le=MAX_BYTES)]  # a size: 64MiB, 1GB or bytes; > 0
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]  # partitions, batch sizes, connections
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]  # a rate or share, 0 to 1 inclusive
Days = Annotated[float, Field(ge=0.0, le=MAX_DAYS)]
Seconds = Annotated[float, Field(gt=0.0, le=MAX_SECONDS)]
Price = Annotated[float, Field(ge=0.0, le=MAX_PRICE)]  # dollars
