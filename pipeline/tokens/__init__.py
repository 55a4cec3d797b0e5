"""Stages 3 and 4 (pure cores): tokenize once, and the global seeded shuffle that packs
tokens into shards."""
