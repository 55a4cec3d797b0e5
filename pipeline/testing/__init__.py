"""Helpers for tests and benchmarks, never imported by the product: a local S3 server (moto,
from the `test` extra), fault and latency proxies, synthetic versions."""
