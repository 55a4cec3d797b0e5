"""Shared foundations: the storage layer, where a dataset's files live, the single-writer lease,
text identity (normalisation, hashes, ids), units and formatters, the strict config base."""
