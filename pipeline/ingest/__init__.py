"""Stage 1: a metadata-only listing cut into byte-balanced work units, and the record readers
(JSONL, Parquet, text) that quarantine bad records with a reason."""
