"""What `load_config` checks of a validated config against the files it names, before anything
is written; each problem a ConfigError naming the key and the file (exit 2): a local input is a
folder that exists and lies outside the dataset the run writes, the tokenizer reads and holds its
EOS/BOS tokens, each curation chain's files read and its `python` functions import.
"""

from __future__ import annotations

import os

from pipeline.config.errors import ConfigError
from pipeline.config.model import Config
from pipeline.core.storage import is_remote


def check_chains(config: Config, source: str) -> None:
    """Each curation chain's files read and decoded, its `python` functions imported (what a
    worker would refuse, refused before anything starts: curate/chain.check)."""
    from pipeline.curate.chain import check
    from pipeline.curate.user import CurationError

    chains = [("curate", config.curate)]
    if config.inputs is not None:
        chains += [(f"inputs.{i}.curate", s.curate) for i, s in enumerate(config.inputs)]
    elif config.input is not None:
        chains.append(("input.curate", config.input.curate))
    for key, chain in chains:
        if not chain:
            continue
        try:
            check(chain, key)
        except CurationError as e:
            raise ConfigError(f"{source}: key {e}") from None


def _key_of(config: Config, i: int) -> str:
    return f"inputs.{i}.uri" if config.named_sources else "input.uri"


def check_overlap(config: Config, source: str) -> None:
    """An input inside the dataset the run writes would be read back as documents. (An output
    inside the input is fine: the listing skips it as own_output, see ingest/listing.py.)"""
    for i, src in enumerate(config.sources):
        inp, out = src.uri.rstrip("/"), f"{config.output.uri.rstrip('/')}/{config.name}"
        if not is_remote(inp) and not is_remote(out):
            inp, out = os.path.realpath(inp), os.path.realpath(out)
        if inp == out or inp.startswith(out + "/"):
            raise ConfigError(
                f"{source}: key '{_key_of(config, i)}': the input {inp} is"
                f" {'' if inp == out else 'inside '}the output dataset {out}"
                " (output.uri + name), which this run writes; give an input outside it"
            )


def check_paths(config: Config, source: str) -> None:
    for i, src in enumerate(config.sources):
        if not is_remote(src.uri) and not os.path.exists(src.uri):
            raise ConfigError(
                f"{source}: key '{_key_of(config, i)}': path does not exist: {src.uri}"
            )
        if not is_remote(src.uri) and not os.path.isdir(src.uri):
            # the listing walks a folder (ingest/listing.py); a file is read through its folder
            folder, name = os.path.split(src.uri)
            raise ConfigError(
                f"{source}: key '{_key_of(config, i)}': {src.uri} is a file, not a folder: give"
                f" its folder ({folder}) and, to read only this file, include: [{name!r}]"
            )
    tok = config.tokenize.tokenizer
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(tok)
    except Exception as e:  # any failure to read or parse is a config error for the user
        raise ConfigError(
            f"{source}: key 'tokenize.tokenizer': cannot read tokenizer file {tok}: {e}"
        ) from None
    from pipeline.tokens.encode import special_id

    for key in ("eos", "bos"):
        token = getattr(config.tokenize, key)
        if token is None:
            continue
        try:
            special_id(tokenizer, token, tok)
        except ValueError as e:
            raise ConfigError(f"{source}: key 'tokenize.{key}': {e}") from None
