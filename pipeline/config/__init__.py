"""A run's configuration: read from YAML, validated, and keyed for reuse.

loader.py: `load_config`, the top-level `Config` model, `--set` overrides, `ConfigError`;
sections.py: the models of its sections (input, storage, dedup, tokenize, pack, ...);
reuse_keys.py: which stages' bytes each key changes, and the stage keys derived from that;
reference.py: the configuration reference (`python -m pipeline config`, docs/configuration.md).
"""
