"""The `prices` section of the config: the price table the cost report and `plan` use.

Defaults are AWS S3 us-east-1 list prices; set your own provider's in the config. Storage is
priced per GB-month of 2^30 bytes, requests per 1,000, retrieval per GB read from a cold class.
"""

from __future__ import annotations

from pydantic import Field

from pipeline.core.model import MAX_BYTES, MAX_DAYS, MAX_PRICE, StrictModel
from pipeline.retention.policy import STORAGE_CLASSES


class ClassPrice(StrictModel):
    gb_month: float = Field(
        ge=0, le=MAX_PRICE, description="$ per GB-month stored", examples=[0.023]
    )
    put_per_1000: float = Field(
        ge=0,
        le=MAX_PRICE,
        description="$ per 1,000 PUT, COPY, POST or LIST requests",
        examples=[0.005],
    )
    get_per_1000: float = Field(
        ge=0, le=MAX_PRICE, description="$ per 1,000 GET or HEAD requests", examples=[0.0004]
    )
    retrieval_per_gb: float = Field(
        default=0.0, ge=0, le=MAX_PRICE, description="$ per GB read back from this class"
    )
    min_days: int = Field(
        default=0, ge=0, le=MAX_DAYS, description="minimum storage duration billed, days"
    )


class PricesConfig(StrictModel):
    """us-east-1 list prices. GLACIER and DEEP_ARCHIVE request and retrieval prices are AWS
    list prices for standard retrieval: check them against your own bill before relying on them."""

    standard: ClassPrice = Field(
        default=ClassPrice(gb_month=0.023, put_per_1000=0.005, get_per_1000=0.0004),
        description="STANDARD storage class",
    )
    standard_ia: ClassPrice = Field(
        default=ClassPrice(
            gb_month=0.0125,
            put_per_1000=0.01,
            get_per_1000=0.001,
            retrieval_per_gb=0.01,
            min_days=30,
        ),
        description="STANDARD_IA (infrequent access)",
    )
    glacier_ir: ClassPrice = Field(
        default=ClassPrice(
            gb_month=0.004, put_per_1000=0.02, get_per_1000=0.01, retrieval_per_gb=0.03, min_days=90
        ),
        description="GLACIER_IR (instant retrieval)",
    )
    glacier: ClassPrice = Field(
        default=ClassPrice(
            gb_month=0.0036,
            put_per_1000=0.03,
            get_per_1000=0.0004,
            retrieval_per_gb=0.01,
            min_days=90,
        ),
        description="GLACIER (flexible retrieval: a restore before reading)",
    )
    deep_archive: ClassPrice = Field(
        default=ClassPrice(
            gb_month=0.00099,
            put_per_1000=0.05,
            get_per_1000=0.0004,
            retrieval_per_gb=0.02,
            min_days=180,
        ),
        description="DEEP_ARCHIVE (a restore of hours before reading)",
    )
    egress_per_gb: float = Field(
        default=0.09, ge=0, le=MAX_PRICE, description="$ per GB transferred out of the region"
    )
    bytes_per_gb: int = Field(
        default=2**30,
        ge=1,
        le=MAX_BYTES,
        description="bytes in a billed GB (AWS bills GB-months of 2^30)",
    )
    days_per_month: float = Field(
        default=30.0,
        gt=0,
        le=31,
        description="days in a billed month, for minimum-duration charges",
    )

    def for_class(self, storage_class: str) -> ClassPrice:
        """Prices of a storage class; classes not in the table are priced as STANDARD."""
        return (
            getattr(self, storage_class.lower())
            if storage_class in STORAGE_CLASSES
            else self.standard
        )
