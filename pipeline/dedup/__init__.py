"""Stage 2 (pure cores): exact dedup by content hash, MinHash signatures and bands, and
distributed connected components with the keep rule."""
