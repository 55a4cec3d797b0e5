"""The configuration reference, generated from the config models' field descriptions.

    python -m pipeline config --defaults    the full default config as commented YAML
    python -m pipeline config --markdown    docs/configuration.md (tests keep the file current)

Required keys take their field's first `examples` value; `inputs:` shows one example source. A
model met again (each retention rule, each price class) has its keys described the first time.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ByteSize
from pydantic.fields import FieldInfo

from pipeline.cli import exit_codes
from pipeline.config.model import Config
from pipeline.ingest import listing
from pipeline.retention import policy as retention_policy

REGENERATE = "python -m pipeline config --markdown > docs/configuration.md"


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model under Optional[...] / list[...], whether it is a list of them)."""
    tp = annotation
    if get_origin(tp) in (Union, types.UnionType):
        tp = next(a for a in get_args(tp) if a is not type(None))
    if get_origin(tp) is list:
        item = get_args(tp)[0]
        return (item, True) if _is_model(item) else (None, False)
    return (tp, False) if _is_model(tp) else (None, False)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _example(model: type[BaseModel]) -> dict[str, Any]:
    """A valid instance's data: defaults, and each required key's first example."""
    data: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        sub, is_list = _model_of(field.annotation)
        if field.is_required():
            data[name] = field.examples[0] if field.examples else _example(sub)
        elif is_list and name == "inputs":
            data[name] = [_example(sub)]
    return data


def example_config() -> Config:
    """The default config with example values where a key is required (one source, `inputs`)."""
    return Config.model_validate(_example(Config))


def _scalar(value: Any) -> str:
    if isinstance(value, ByteSize):
        for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if value and value % scale == 0:
                return f"{value // scale}{unit}"
        return str(int(value))
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _yaml_lines(model: BaseModel, indent: str, seen: set, item: bool = False) -> list[str]:
    lines: list[str] = []
    first_seen = type(model) not in seen
    seen.add(type(model))
    for i, (name, field) in enumerate(type(model).model_fields.items()):
        value = getattr(model, name)
        lead = indent if not (item and i == 0) else indent[:-2] + "- "
        if first_seen or isinstance(value, BaseModel):
            lines.append(f"{indent}# {_describe(field)}")
        sub, is_list = _model_of(field.annotation)
        if isinstance(value, BaseModel):
            lines.append(f"{lead}{name}:")
            lines += _yaml_lines(value, indent + "  ", seen)
        elif is_list and value:
            lines.append(f"{lead}{name}:")
            for entry in value:
                lines += _yaml_lines(entry, indent + "    ", seen, item=True)
        else:
            lines.append(f"{lead}{name}: {_scalar(_plain(value))}")
            if is_list and first_seen:  # an empty list of models: say what an entry holds
                for sub_name, sub_field in sub.model_fields.items():
                    lines.append(f"{indent}#   each: {sub_name}: {_describe(sub_field)}")
    return lines


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    return value


def _describe(field: FieldInfo) -> str:
    required = " (required)" if field.is_required() else ""
    return f"{field.description}{_range(field)}{required}"


def _range(field: FieldInfo) -> str:
    """A numeric key's bounds (core/model.py), e.g. ` (1 <= value <= 1000000)`; '' for other
    keys. Every numeric key has both (tests/unit/test_config_values.py)."""
    bounds = {}
    for m in field.metadata:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(m, name, None) is not None:
                bounds[name] = getattr(m, name)
    if not bounds:
        return ""
    tp = field.annotation
    if get_origin(tp) in (Union, types.UnionType):
        tp = next(a for a in get_args(tp) if a is not type(None))
    show = _size if isinstance(tp, type) and issubclass(tp, ByteSize) else _number
    low = f"{show(bounds['ge'])} <= " if "ge" in bounds else f"{show(bounds.get('gt'))} < "
    high = f" <= {show(bounds['le'])}" if "le" in bounds else f" < {show(bounds.get('lt'))}"
    return f" ({low}value{high})"


def _number(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}" if isinstance(value, float) and not value.is_integer() else f"{int(value)}"


def _size(value: int | None) -> str:
    if not value:
        return "0" if value == 0 else "?"
    for unit, scale in (("EiB", 2**60), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if value and value % scale == 0:
            return f"{value // scale}{unit}"
    return f"{int(value)} bytes"


def defaults_yaml() -> str:
    """The full default config as YAML, a comment above every key, then the curation steps
    (commented: the default chain is empty)."""
    head = [
        "# The full default configuration (python -m pipeline config --defaults).",
        "# Keys marked (required) show an example value; every other value is the default.",
        "# Sizes take 64MiB, 1GB or a number of bytes. Give `input:` (one source) or `inputs:`.",
    ]
    return "\n".join(head + _yaml_lines(example_config(), "", set()) + _curate_yaml()) + "\n"


# -- curation steps (curate: and inputs[].curate: lists) --------------------------------------
def curate_steps() -> list[tuple[str, str, str, list[tuple[str, str, str]]]]:
    """Each registered curation step: (name, kind, what it is (its module's first sentence),
    [(parameter, default or "(required)", meaning)])."""
    from pipeline.curate.chain import REGISTRY

    steps = []
    for name, cls in sorted(REGISTRY.items()):
        params = []
        for key, field in cls.Params.model_fields.items():
            default = None if field.is_required() else field.get_default(
                call_default_factory=True)  # fmt: skip
            shown = "(required)" if field.is_required() else _scalar(_plain(default))
            if isinstance(default, tuple) and len(default) > 20:  # characters: as they look
                shown = f"the {len(default)} characters {' '.join(default)}"
            params.append((key, shown, field.description or ""))
        kind = getattr(cls, "kind", "") or "filter or transform"  # python: as configured
        doc = cls.__dict__.get("__doc__") or sys.modules[cls.__module__].__doc__ or ""
        steps.append((name, kind, " ".join(doc.split("\n\n")[0].split()), params))
    return steps


_CURATE_HEAD = (
    "A chain (`curate:`, or a source's own `inputs[].curate:`) is a list of one-key mappings,"
    " `- step: {parameter: value}`, run in order; a parameter left out takes its default."
    " Files are relative to the config's folder and are read, decoded and checked when the"
    " config loads (exit 2), as are `python` steps' functions. docs/curate.md has the"
    " definitions."
)


def _curate_yaml() -> list[str]:
    lines = ["", f"# Curation steps: {_CURATE_HEAD}",
             "# e.g. curate: [{gopher_quality: {}}, {pii: {}}]"]  # fmt: skip
    for name, kind, what, params in curate_steps():
        lines.append(f"#   {name} ({kind}): {what}")
        for key, shown, meaning in params:
            lines.append(f"#     {key}: {shown}  # {meaning}")
    return lines


def _shown(default: str) -> str:
    return default if default == "(required)" else "`" + default.replace("|", "\\|") + "`"


def _curate_section() -> list[str]:
    lines = ["## Curation steps", "", _CURATE_HEAD, ""]
    for name, kind, what, params in curate_steps():
        lines += [f"### `{name}` ({kind})", "", _cell(what), "",
                  "| parameter | default | meaning |", "|---|---|---|"]  # fmt: skip
        lines += [f"| `{key}` | {_shown(shown)} | {_cell(meaning)} |"
                  for key, shown, meaning in params]  # fmt: skip
        lines.append("")
    return lines


# -- Markdown ----------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: Any) -> str:
    return f"`{_scalar(_plain(value))}`".replace("|", "\\|")


def _table_rows(model: BaseModel, prefix: str, first: dict) -> list[str]:
    """One row per key; a model met again (retention rules, price classes) is one row with the
    values that differ from its own defaults, its keys described at its first occurrence."""
    rows = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key, meaning = f"{prefix}{name}", _cell((field.description or "") + _range(field))
        sub, is_list = _model_of(field.annotation)
        if isinstance(value, BaseModel) and type(value) in first:
            own = yaml.safe_dump(
                value.model_dump(mode="json", exclude_defaults=True),
                default_flow_style=True,
                width=10**6,
            ).strip()
            rows.append(f"| `{key}` | `{own}` | {meaning} (keys as in `{first[type(value)]}`) |")
        elif isinstance(value, BaseModel):
            first[type(value)] = key
            rows.append(f"| `{key}` | | {meaning} |")
            rows += _table_rows(value, f"{key}.", first)
        elif is_list and sub is not None:
            shown = "(required)" if field.is_required() else _code(value)
            if name == "inputs":
                shown = "(one entry: the keys below)"
            rows.append(f"| `{key}` | {shown} | {meaning} |")
            rows += _table_rows(sub.model_validate(_example(sub)), f"{key}[].", first)
        else:
            shown = "(required)" if field.is_required() else _code(value)
            rows.append(f"| `{key}` | {shown} | {meaning} |")
    return rows


def _formats_section() -> list[str]:
    by_format: dict[str, list[str]] = {}
    for suffix, fmt in listing._FORMAT_SUFFIXES.items():
        by_format.setdefault(fmt, []).append(f"`{suffix}`")
    compressions = ", ".join(f"`{s}`" for s in listing._COMPRESSION_SUFFIXES)
    return [
        "## Formats and globs",
        "",
        "A file's format comes from its extension (case-insensitive); an optional "
        f"{compressions} suffix after it sets the compression.",
        "",
        "| format | extensions | read as |",
        "|---|---|---|",
        f"| jsonl | {' '.join(by_format['jsonl'])} | JSON Lines: one JSON object per line"
        " (a line holding a JSON array gives one record per element) |",
        f"| text | {' '.join(by_format['text'])} | the whole file is one document |",
        f"| parquet | {' '.join(by_format['parquet'])} | one document per row; uncompressed"
        " only (Parquet compresses inside) |",
        "",
        "- **`.json` is read as JSON Lines.** A pretty-printed JSON document or a JSON array"
        " spread over several lines is quarantined line by line as `malformed_json`, and the"
        " quarantine detail says so: convert it to one object per line (`jq -c '.[]'`).",
        "- **Any other extension is skipped**, e.g. `.csv`, `.bz2`, `.xz`, `.json.bz2`: the file"
        " appears in the run's `skipped.parquet` with reason `unsupported_format`, counted on"
        " the summary's `files skipped` line and listed by `run --dry-run`.",
        "- Other skip reasons: `hidden` (a path component starts with `.`), `marker` (a name"
        " starting with `_`, such as `_SUCCESS`, or ending with `.crc`), `excluded` (no"
        " `include` glob matches, or an `exclude` glob does), `own_output` and"
        " `pipeline_dataset` (a pipeline dataset inside the input), and for local folders"
        " `symlink_outside_input`, `symlink_loop`, `dangling_symlink`, `non_utf8_name`,"
        " `not_a_regular_file` (pipeline/ingest/listing.py, pipeline/ingest/local_listing.py).",
        "- **Globs** (`include`, `exclude`) match the whole path relative to the source's `uri`:"
        " `*` and `?` stay within one path component, `**` as a whole component matches any"
        " number of components. So `*.jsonl` matches top-level files only; write `**/*.jsonl`"
        ' for any depth. The default `include` is `["**"]` (everything).',
        "- Units: the listing is cut into work units of about `ingest.unit_bytes` (default"
        f" {_scalar(Config.model_fields['ingest'].default.unit_bytes)}); uncompressed JSONL and"
        " Parquet files larger than a unit are split into byte ranges, compressed and text"
        " files never are.",
        "",
    ]


def _retention_section() -> list[str]:
    doc = retention_policy.__doc__ or ""
    policy = doc[doc.index("Default policy:") :].strip()
    classes = doc[doc.index("Data classes") : doc.index("Default policy:")].strip()
    return [
        "## Retention",
        "",
        "`python -m pipeline retain --config C` prints the plan; `--apply` carries it out.",
        "",
        "```",
        classes,
        "```",
        "",
        " ".join(policy.split()),
        "",
    ]


def markdown() -> str:
    """docs/configuration.md."""
    cfg = example_config()
    lines = [
        "# Configuration reference",
        "",
        f"<!-- generated by `{REGENERATE}`; edit the field descriptions in"
        " pipeline/config/model.py, pipeline/config/sections.py, pipeline/retention/policy.py,"
        " pipeline/report/prices.py or the text in pipeline/config/reference.py, not this file -->",
        "",
        "A config is a YAML file validated on load: an unknown key, a wrong type or a value out"
        f" of range exits {exit_codes.CONFIG_ERROR} naming the key and the file, before anything"
        " is written. `--set key.sub=value` overrides any key; relative paths in the file are"
        " resolved against its folder. `python -m pipeline config --defaults` prints every key"
        " with its default as commented YAML. Sizes take `64MiB`, `1GB` or a number of bytes.",
        "",
        "Give either `input:` (one source, named like the dataset) or `inputs:` (named sources,"
        " in priority order: dedup keeps the copy of the first listed).",
        "",
        "| key | default | meaning |",
        "|---|---|---|",
        *_table_rows(cfg, "", {}),
        "",
        *_curate_section(),
        *_formats_section(),
        *_retention_section(),
        "## Exit codes",
        "",
        *[f"- `{code}` {text}" for code, text in exit_codes.EXIT_CODES.items()],
        "",
    ]
    return "\n".join(lines)
