"""Loading a run configuration: a YAML file merged with the command line's overrides (--input,
--output, --set), validated into a Config (config/model.py), then checked against the files it
names (config/path_checks.py).

Relative local paths inside a config file (input.uri, output.uri, tokenize.tokenizer) are resolved
against the config file's folder, so a config works from any working directory; paths given on the
command line (--input, --output, --set) are resolved against the working directory, as a shell
user expects. Any error names the key and the file and exits with code 2 before anything is written.

Credentials are never part of the config: s3fs takes them from the usual AWS environment
(variables, profile files, instance roles). Only the endpoint, region and profile *name* live here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipeline.config import path_checks
from pipeline.config.errors import ConfigError
from pipeline.config.model import Config
from pipeline.core.storage import is_remote
from pipeline.extract.config import check_engine


def _resolve_local(uri: str, base: Path) -> str:
    if is_remote(uri):
        return uri
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    path = Path(os.path.expanduser(uri))
    return str(path if path.is_absolute() else (base / path).resolve())


_PATH_KEYS = (("input", "uri"), ("output", "uri"), ("tokenize", "tokenizer"))


def _resolve_paths(raw: dict, base: Path) -> None:
    for section, key in _PATH_KEYS:
        sub = raw.get(section)
        if isinstance(sub, dict) and isinstance(sub.get(key), str):
            sub[key] = _resolve_local(sub[key], base)
    sources = raw.get("inputs")
    chains = [raw.get("curate"), (raw.get("input") or {}).get("curate")]
    if isinstance(sources, list):
        for sub in sources:
            if isinstance(sub, dict) and isinstance(sub.get("uri"), str):
                sub["uri"] = _resolve_local(sub["uri"], base)
            chains.append(sub.get("curate") if isinstance(sub, dict) else None)
    for chain in chains:
        _resolve_step_files(chain, base)


def _resolve_step_files(chain: Any, base: Path) -> None:
    """A curation step's file parameters (`*_file`, `benchmarks`) from the config's folder."""
    for step in chain if isinstance(chain, list) else []:
        for params in step.values() if isinstance(step, dict) else []:
            for key, value in params.items() if isinstance(params, dict) else []:
                if isinstance(value, str) and (key.endswith("_file") or key == "benchmarks"):
                    params[key] = _resolve_local(value, base)
                elif key == "benchmarks" and isinstance(value, list):
                    params[key] = [_resolve_local(v, base) if isinstance(v, str) else v
                                   for v in value]  # fmt: skip


def _apply_override(raw: dict, dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = raw
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: key '{dotted}': '{key}' is not a section")
        node = child
    node[keys[-1]] = value


def parse_set(assignment: str) -> tuple[str, Any]:
    """Parse one `--set key.sub=value`; the value is read as a YAML scalar (1MiB, false, 3, ...)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected key.sub=value")
    key, _, text = assignment.partition("=")
    key = key.strip()
    try:
        return key, yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:  # an unclosed quote or bracket, bytes that are not UTF-8
        raise ConfigError(f"--set {key}: not a YAML value: {_yaml_problem(e)}") from None


def format_error(err: ValidationError, source: str, section: str = "") -> str:
    """pydantic's errors as one line naming the file and each key (under `section`, for a
    section validated alone)."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in (section, *e["loc"]) if p != "")
        if not key:  # a rule over several keys (Config._one_input_form)
            lines.append(f"{source}: {e['msg'].removeprefix('Value error, ')}")
        elif e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        elif e["type"] == "missing":
            lines.append(f"{source}: missing required key '{key}'")
        else:  # a rule over a section's keys (its input: the section) says what it got
            msg, got = e["msg"].removeprefix("Value error, "), e.get("input")
            lines.append(
                f"{source}: key '{key}': {msg}"
                + ("" if isinstance(got, dict) else f" (got {got!r})")
            )
    return "; ".join(lines)  # one line, however many keys are wrong


def load_config(
    path: str | os.PathLike,
    *,
    input_uri: str | None = None,
    output_uri: str | None = None,
    overrides: list[str] = (),
    check_paths: bool = True,
) -> Config:
    """Load, override, validate. Raises ConfigError naming the key and the file."""
    path = Path(path)
    source = str(path)
    raw = _read_yaml(path, source)
    _resolve_paths(raw, path.parent.resolve())

    cwd_raw: dict = {}
    if input_uri is not None:
        _override_input(raw, cwd_raw, input_uri, source)
    if output_uri is not None:
        _apply_override(cwd_raw, "output.uri", output_uri, "--output")
    for assignment in overrides:
        key, value = parse_set(assignment)
        _apply_override(cwd_raw, key, value, f"--set {key}")
    _resolve_paths(cwd_raw, Path.cwd())
    merged = _deep_merge(raw, cwd_raw)
    check_text(merged, source)

    try:
        config = Config.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(format_error(e, source)) from None
    path_checks.check_overlap(config, source)
    try:
        check_engine(config.extract)
    except ValueError as e:
        raise ConfigError(f"{source}: key 'extract.engine': {e}") from None
    if check_paths:
        path_checks.check_paths(config, source)
        path_checks.check_chains(config, source)
    return config


def _read_yaml(path: Path, source: str) -> dict:
    """The config file's top-level mapping; ConfigError in one line when the file cannot be read,
    is not UTF-8 or not YAML (PyYAML's message spans several lines: its problem and where)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start});"
            " save the config as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"{source}: cannot read the config: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level")
    return raw


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error as one line: where (line and column, from 1) and what."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = f"{problem} ({context})" if context else problem
    what = what.replace(' in "<unicode string>",', " at")  # a ReaderError's, without a mark
    return where + " ".join(what.split())


def check_text(node: Any, source: str, key: str = "") -> None:
    """Every string of the config is text the run can record (manifests, listings and logs are
    UTF-8): a value from a non-UTF-8 file name or argument (Python keeps its bytes as lone
    surrogates) is refused naming the key, where it would fail later as a traceback."""
    if isinstance(node, dict):
        for k, v in node.items():
            check_text(v, source, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_text(v, source, f"{key}.{i}")
    elif isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"{source}: key '{key}': \"{_shown(node)}\" is not valid UTF-8 (a file or folder"
                " name of other bytes?): give a name in UTF-8"
            ) from None


def _shown(text: str) -> str:
    """A string of undecodable bytes made printable: the bytes as \\x escapes."""
    try:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate not from a byte (a YAML "\\ud800" escape)
        return text.encode("utf-8", "backslashreplace").decode()


def _override_input(raw: dict, cwd_raw: dict, input_uri: str, source: str) -> None:
    """--input replaces the uri of the config's only source: `input.uri`, or `inputs[0].uri`
    when `inputs` names one source. A config of several sources is refused (exit 2): which one
    would it replace? Point a source elsewhere with the config or `--set inputs=[...]`."""
    sources = raw.get("inputs")
    if not isinstance(sources, list):
        _apply_override(cwd_raw, "input.uri", input_uri, "--input")
        return
    if len(sources) != 1 or not isinstance(sources[0], dict):
        raise ConfigError(
            f"{source}: --input: this config has {len(sources)} named sources ('inputs');"
            " --input replaces the input of a single-source config only. Give each source's"
            " uri in the config, or replace the list with --set 'inputs=[{name: ..., uri: ...}]'"
        )
    sources[0] = {**sources[0], "uri": _resolve_local(input_uri, Path.cwd())}


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
