"""Training-time reading: the stream reader (large range GETs, prefetch depth from Little's
law), its fetcher and windows, and `plan`, the read-side arithmetic."""
