"""Curation in the read pass: filters and transforms over a unit's documents (pure cores)."""
