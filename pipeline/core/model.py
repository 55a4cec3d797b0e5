"""The base of every configuration model, and bounded value types for every numeric key.

Unknown keys are errors and values are frozen (StrictModel). Every number in the config
(pipeline/config_sections.py, pipeline/retention/policy.py, pipeline/report/prices.py) takes one
of these types, or a `Field` with an explicit bound, so that a value that cannot work (a size of
0, a negative seed, a fraction above 1) is a configuration error naming the key and the file
(exit 2) before anything runs. tests/unit/test_config_values.py walks every numeric key of the
model and fails for one without a bound: a new key must pick a type here.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ByteSize, ConfigDict, Field


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Bytes = Annotated[ByteSize, Field(gt=0)]  # a size: 64MiB, 1GB or a number of bytes; > 0
Count = Annotated[int, Field(ge=1)]  # partitions, batch sizes, connections, attempts
Seed = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]  # a rate or share, 0 to 1 inclusive
Days = Annotated[float, Field(ge=0.0)]
Seconds = Annotated[float, Field(gt=0.0)]
Price = Annotated[float, Field(ge=0.0)]  # dollars
