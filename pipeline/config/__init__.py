"""A run's configuration: read from YAML, validated, and keyed for reuse.

loader.py: `load_config` (YAML file, `--input`/`--output`/`--set` overrides, merged and validated);
model.py: the top-level `Config` model (the rules across sections, sources, chains, reuse keys);
path_checks.py: what load_config checks of the files a config names (inputs, tokenizer, chains);
errors.py: `ConfigError` (one line naming the key and the file, exit 2);
sections.py: the models of its sections (input, storage, dedup, tokenize, pack, ...);
reuse_keys.py: which stages' bytes each key changes, and the stage keys derived from that;
reference.py: the configuration reference (`python -m pipeline config`, docs/configuration.md).
"""
