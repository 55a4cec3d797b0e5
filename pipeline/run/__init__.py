"""The thin Ray layer: the driver that runs the stages in order, the task bodies (storage ->
pure core -> storage) and the typed results they return, the near-dedup tasks and the end-of-run
summary."""
