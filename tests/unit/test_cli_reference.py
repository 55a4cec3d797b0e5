"""The configuration reference, the help text of every command and option, and `run --dry-run`.

The config models and the parsers are walked, so a key or option added later is covered
without editing this test."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import yaml
from pydantic import BaseModel
from support import REPO, SOURCES_CONFIG, TOKENIZER

from pipeline.cli import main as cli
from pipeline.cli.exit_codes import EXIT_CODES
from pipeline.cli.tool_commands import BENCHES
from pipeline.config import reference as config_reference
from pipeline.config.model import Config


def _models(model: type[BaseModel], seen: set) -> set:
    seen.add(model)
    for field in model.model_fields.values():
        sub, _ = config_reference._model_of(field.annotation)
        if sub is not None and sub not in seen:
            _models(sub, seen)
    return seen


def test_every_field_of_every_config_model_has_a_description():
    models = _models(Config, set())
    assert {m.__name__ for m in models} >= {"RetentionRules", "ClassPrice", "Transition"}
    missing = [
        f"{m.__name__}.{name}"
        for m in models
        for name, field in m.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, f"fields without Field(description=...): {missing}"


def test_config_defaults_is_a_loadable_config_with_every_key_commented(capsys):
    assert cli.main(["config", "--defaults"]) == 0
    text = capsys.readouterr().out
    assert Config.model_validate(yaml.safe_load(text)) == config_reference.example_config()
    assert "unit_bytes: 64MiB" in text and "eos: <|endoftext|>" in text
    assert "include: ['**']" in text and "inputs:\n" in text
    lines = text[: text.index("\nretention:")].splitlines()  # rules repeat: described once
    for above, line in zip(lines, lines[1:], strict=False):
        if not line.lstrip().startswith("#"):
            assert above.lstrip().startswith("#"), f"no comment above {line!r}"


def test_docs_configuration_md_is_generated_from_the_models():
    current = (REPO / "docs/configuration.md").read_text()
    assert current == config_reference.markdown(), (
        f"docs/configuration.md is stale: run `{config_reference.REGENERATE}`"
    )
    for text in ("`ingest.unit_bytes` | `64MiB`", "unsupported_format", "`*.jsonl` matches",
                 "Default policy:", "`retention.rules.read_docs` | `{delete_after_days: 14.0}`"):
        assert text in current, text


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    top = cli.build_parser()
    found = [("python -m pipeline", top)]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [(f"command {name}", p) for name, p in action.choices.items()]
    for name, module in BENCHES.items():
        found.append((f"bench {name}", importlib.import_module(module).build_parser()))
    return found


def test_every_command_and_option_has_help_and_run_lists_the_exit_codes():
    missing = []
    for where, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{where}: command {c.dest}" for c in action._choices_actions
                            if not c.help]
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{where}: {action.option_strings or action.dest}")
    assert not missing, f"no help text: {missing}"
    top = cli.build_parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert all(name in top.description for name in commands.choices)  # plan included
    run = commands.choices["run"]
    assert run.description
    for code, text in EXIT_CODES.items():
        assert f"{code}  {text}" in run.format_help()


def _corpus(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    (src / "deep").mkdir(parents=True)
    (src / "a.jsonl").write_text(json.dumps({"id": "a1", "text": "hello", "lang": "en"}) + "\n")
    (src / "deep" / "b.jsonl").write_text(json.dumps({"body": "no text field"}) + "\n")
    (src / "pretty.json").write_text(json.dumps([{"text": "x"}, {"text": "y"}], indent=2))
    (src / "table.csv").write_text("id,text\n1,hello\n")
    (src / "old.jsonl.bz2").write_bytes(b"BZh9")
    return src


def test_run_dry_run_lists_files_skipped_and_first_records_and_writes_nothing(tmp_path, capsys):
    src, out = _corpus(tmp_path), tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "d", "input": {"uri": str(src)}, "output": {"uri": str(out)},
        "tokenize": {"tokenizer": str(TOKENIZER)},
    }))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert cli.main(["run", "--dry-run", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert "files      3 (" in text and "3 jsonl" in text
    assert "2 unsupported_format" in text
    assert "table.csv  (unsupported_format" in text and "old.jsonl.bz2  (unsupported_format" in text
    assert "lang: 'en'" in text and "text: 'hello'  <- text_field" in text
    assert "read as JSON Lines" in text  # pretty.json: its first line is '['
    assert "units      1 of about 64.0MiB" in text and "1 dedup partitions" in text


def test_run_dry_run_on_the_sample(capsys):
    assert cli.main(["run", "--dry-run", "--config", str(SOURCES_CONFIG)]) == 0
    text = capsys.readouterr().out
    assert "source docs:" in text and "source web:" in text
    assert "all sources: 100 files" in text and "5 units, 4 dedup partitions" in text
