"""The on-disk formats trainers and tools read: Megatron MMIDIDX shards, the manifest, and the
verification of a committed version against its manifest."""
