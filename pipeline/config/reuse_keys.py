"""Which config keys change which bytes, declared once per key, and the keys derived from that.

Contract: every config field declares the stages whose bytes it changes; a field without
a declaration fails the moment a key is derived; a stage's key hashes exactly what decides
its bytes (files by content), so an intermediate is reused exactly when it would be the same.
In full: docs/formats.md, "Reuse keys: which config keys change which bytes".
"""

from __future__ import annotations

import hashlib
import json
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from pipeline.core.storage import Location, is_remote
from pipeline.tokens.framed import FORMAT as TOKEN_FORMAT

Stage = Literal["read", "tokens", "output"]
STAGES: tuple[str, ...] = get_args(Stage)
# Bumped when the code changes what an intermediate holds (2: quarantine rows carry `records`;
# 3: hash and signature rows carry the source (origin, origin_rank), and a unit's hash rows
#    are one sectioned object (exchange/sections.py);
# 4: the read task tokenizes: token files hold every document, a unit's documents file no text;
# 5: a token file holds each split in one block, its index a `valid` column;
# 6: token files' dtype follows the tokenizer's largest id; the read pass's removals (curation,
#    takedown list) are one audit file per unit, with a `detail` column;
# 7: quarantine rows carry the `doc_id` the record would have had;
# 8: a unit's hash object holds row sections (exchange/row_codec.py), not Arrow streams).
LAYOUT_VERSION = 8
_KEY = "changes_bytes_of"


def changes(
    *stages: Stage, by_content: bool = False, columns_only: bool = False
) -> dict[str, Any]:
    """Field metadata (`Field(..., json_schema_extra=changes("read", "output"))`): the stages
    whose bytes this key changes; none: it changes how or where, never which bytes."""
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stages {sorted(unknown)}; stages are {STAGES}")
    flags = {"by_content": by_content, "columns_only": columns_only}
    return {_KEY: sorted(stages), **{k: True for k, v in flags.items() if v}}


def declared(field: Any) -> dict[str, Any] | None:
    """A field's declaration (changes(...)), or None where the field declares nothing."""
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) and _KEY in extra else None


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The model a section field holds: X, X | None and list[X] (the `inputs` list) give X."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return section_model(args[0]) if len(args) == 1 else None
    if origin is list:
        return section_model(get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def declarations(model: type[BaseModel], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every declaration under `model`, by dotted key ("tokenize.eos", "inputs.name"); raises
    TypeError naming a field that declares nothing, directly or through its section."""
    out: dict[str, dict[str, Any]] = {}
    for name, field in model.model_fields.items():
        key, decl = f"{prefix}{name}", declared(field)
        if decl is not None:
            out[key] = decl
            continue
        sub = section_model(field.annotation)
        if sub is None:
            raise TypeError(
                f"config key '{key}' does not declare which stages' bytes it changes: give it"
                " json_schema_extra=changes(...) (pipeline/config/reuse_keys.py)"
            )
        out.update(declarations(sub, f"{key}."))
    return out


def _exclude(
    model: type[BaseModel], stage: str, text_only: bool = False
) -> dict[str, Any] | bool:
    """The model_dump exclude of what does not change `stage`'s bytes: True for all of it
    (text_only: nor the columns_only keys)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        decl = declared(field)
        if decl is not None:
            part: Any = (
                stage not in decl[_KEY]
                or decl.get("by_content", False)
                or (text_only and decl.get("columns_only", False))
            )
        else:
            part = _exclude(section_model(field.annotation), stage, text_only)
            if isinstance(part, dict) and _is_list(field.annotation):
                part = {"__all__": part}  # the same keys of every item
        if part:
            out[name] = part
    whole = len(out) == len(model.model_fields) and all(v is True for v in out.values())
    return True if whole else out


def _is_list(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_list(a) for a in get_args(annotation))
    return get_origin(annotation) is list


def _by_content(model: type[BaseModel], stage: str) -> list[tuple[str, ...]]:
    """Dotted paths of the fields counted by their file's content for `stage`."""
    paths = []
    for key, decl in declarations(model).items():
        if decl.get("by_content") and stage in decl[_KEY]:
            paths.append(tuple(key.split(".")))
    return paths


def _value(config: BaseModel, path: tuple[str, ...]) -> Any:
    node: Any = config
    for part in path:
        node = getattr(node, part)
    return node


def stage_data(config: BaseModel, stage: str, text_only: bool = False) -> dict[str, Any]:
    """The config as `stage` sees it: every key that changes its bytes, nothing else
    (text_only: without the keys that only add columns, e.g. inputs[].keep_fields)."""
    exclude = _exclude(type(config), stage, text_only)
    unused = getattr(config, "unused_sections", tuple)()  # e.g. extract: no web archive listed
    if unused and exclude is not True:
        exclude = {**exclude, **dict.fromkeys(unused, True)}
    return config.model_dump(mode="json", exclude=exclude)


def output_config(config: BaseModel) -> dict[str, Any]:
    """Config.output_config: what decides the dataset's bytes (the manifest's `config`)."""
    return stage_data(config, "output")


def output_hash(config: BaseModel) -> str:
    """Config.output_hash: output_config with each by-content file's digest beside its key."""
    data = output_config(config)
    for path in _by_content(type(config), "output"):
        data[path[0]][f"{path[-1]}_sha256"] = file_digest(_value(config, path))
    data.update(_content_files(config, "output"))
    return digest(data)


def stage_keys(config: BaseModel) -> dict[str, str]:
    """The key of each reused intermediate, from everything that decides its bytes.

    A stage's key hashes the config keys declared as changing its bytes. What a unit holds is in
    its id, what dedup removed in `<removed>` (core/layout.py); the token key also hashes the read
    key (token files are made from the read outputs), the tokenizer by content and the format the
    token files are stored in (tokens/framed.FORMAT).
    """
    tokens = _keyed(config, "tokens")
    # the read outputs hold no document the tokenizer quarantines: they depend on the tokens keys
    # (not on how a token file is stored)
    read = {**_keyed(config, "read"), "tokens": digest(tokens)}
    # how a token file is stored (tokens/framed.py): a folder holds one format only
    tokens["token_format"] = TOKEN_FORMAT
    # the read outputs' text, ids and rows: columns_only keys (inputs[].keep_fields) never
    # reach a token file, so changing them re-reads (the read task finds the token file made)
    tokens["read_key"] = digest(_keyed(config, "read", text_only=True))
    return {"read": digest(read), "tokens": digest(tokens)}


def takedown_keyed(key: str, takedown: str) -> str:
    """`key` (a run id, a read key) for a run under a takedown list whose digest is `takedown`:
    `key` itself for an empty list, so a dataset without takedowns keeps its outputs' names."""
    return digest({"key": key, "takedown": takedown}) if takedown else key


def _keyed(config: BaseModel, stage: str, text_only: bool = False) -> dict[str, Any]:
    data = stage_data(config, stage, text_only)
    data["layout"] = LAYOUT_VERSION
    for path in _by_content(type(config), stage):
        data[f"{path[-1]}_sha256"] = file_digest(_value(config, path))
    data.update(_content_files(config, stage))
    return data


def _content_files(config: BaseModel, stage: str) -> dict[str, Any]:
    """The digests of the files a config names inside a key's value (`content_files`: e.g.
    a curation step's word list or module; an object store's file by its URI and ETag), and
    the versions of the code's definitions it names beyond the first (`content_versions`: a
    curation step whose decisions changed); neither: nothing."""
    data: dict[str, Any] = {}
    files = getattr(config, "content_files", lambda _stage: [])(stage)
    if files:
        storage = getattr(config, "storage", None)
        data["content_sha256"] = {
            f: remote_version(f, storage) if is_remote(f) else file_digest(f) for f in files
        }
    versions = getattr(config, "content_versions", lambda _stage: {})(stage)
    if versions:
        data["definitions"] = versions
    return data


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def file_digest(path: str) -> str:
    with open(path.removeprefix("file://"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def remote_version(uri: str, storage: Any) -> str:
    """What stands for an object store file's content in a key: its URI and its ETag now (one
    HEAD, not a read), so that an object replaced in place is read again. FileNotFoundError
    where there is none."""
    return f"{uri}@{Location.from_uri(uri, storage).etag()}"
