"""Curation refused when the config loads (files read and decoded, `python` functions imported
and their signatures checked: exit 2), a `python` step that misbehaves during the run stopped
in one line naming it (HookError), and what the published definitions count (distinct stop
words, repeats from the second occurrence, the full stops of every script)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from support import SAMPLE_CONFIG, TOKENIZER

from pipeline.config import reference as config_reference
from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.curate import chain
from pipeline.curate.base import REGISTRY
from pipeline.curate.user import CurationError, HookError

HOOKS = "pipeline.testing.curate_hooks"
LONG = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"


def step(name: str, **params):
    cls = REGISTRY[name]
    return cls(cls.Params(**params))


def batch(*texts: str) -> pa.Table:
    return pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": list(texts)})


# -- python steps: checked at load ------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_here:f", "cannot import no_such_module_here: ModuleNotFoundError"),
        (f"{HOOKS}:missing", f"module {HOOKS} has no missing"),
        (f"{HOOKS}:NOT_A_FUNCTION", "NOT_A_FUNCTION is not callable"),
        (f"{HOOKS}:two_arguments", r"two_arguments must take the batch as its one argument \(miss"),
    ],
)
def test_a_python_step_that_cannot_run_is_refused_at_load(spec, message):
    with pytest.raises(CurationError, match=message) as e:
        chain.check([{"python": {"callable": spec}}])
    assert str(e.value).startswith("curate[0].python: ") and "\n" not in str(e.value)


# -- python steps: misbehaving during the run -------------------------------------------------
@pytest.mark.parametrize(
    ("hook", "message"),
    [
        ("raises", "raised ValueError: no column 'lang'$"),
        ("one_value", "returned 1 values for 2 documents"),
        ("ints", "a filter returns one boolean per document, got 2 int"),
        ("strings", "a filter returns one boolean per document, got 2 str"),
        ("nothing", "returned None, not one value per document"),
    ],
)
def test_a_python_step_that_misbehaves_stops_in_one_line(hook, message):
    f = step("python", callable=f"{HOOKS}:{hook}")
    with pytest.raises(HookError, match=message) as e:
        f(batch("a", "b"))
    assert f"python step '{HOOKS}:{hook}'" in str(e.value) and "\n" not in str(e.value)


def test_a_transform_returning_booleans_is_named():
    f = step("python", callable=f"{HOOKS}:one_value", kind="transform")
    with pytest.raises(HookError, match="returned 1 values for 2"):
        f(batch("a", "b"))
    g = step("python", callable=f"{HOOKS}:ints", kind="transform")
    with pytest.raises(HookError, match="a transform returns one string per document"):
        g(batch("a", "b"))


def test_a_numpy_bool_array_is_a_filters_answer():
    f = step("python", callable=f"{HOOKS}:keep_long")
    assert f(batch("short", "a text of thirty characters or more")).why == [
        f"{HOOKS}:keep_long returned False", None]  # fmt: skip


# -- files: read and decoded at load ----------------------------------------------------------
def test_c4_bad_words_file_missing_or_not_utf8(tmp_path):
    with pytest.raises(CurationError, match=r"curate\[0\]\.c4: cannot read .*nope.txt: No such"):
        chain.check([{"c4": {"bad_words_file": str(tmp_path / "nope.txt")}}])
    (tmp_path / "latin1.txt").write_bytes("gro\xdf\n".encode("latin-1"))
    with pytest.raises(CurationError, match=r"latin1.txt is not UTF-8 text \(byte 0xdf"):
        chain.check([{"c4": {"bad_words_file": str(tmp_path / "latin1.txt")}}])


def test_block_list_files_and_patterns(tmp_path):
    (tmp_path / "p.txt").write_text("ok\n(unclosed\n")
    with pytest.raises(CurationError, match=r"'\(unclosed' is not a regular expression"):
        chain.check([{"block_list": {"patterns_file": str(tmp_path / "p.txt")}}])
    with pytest.raises(CurationError, match="is a folder, not a file"):
        chain.check([{"block_list": {"domains_file": str(tmp_path)}}])


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (None, None, "cannot read .*missing.jsonl: No such file"),
        ("folder", None, "is a folder, not a file"),
        ("b.txt", "caf\xe9 ".encode("latin-1") * 20, r"not UTF-8 text \(byte 0xe9 at offset 3\)"),
        ("b.jsonl", b'{"q": "x"}\n[1, 2]\n', "line 2 is not a JSON object"),
        ("b.jsonl", b"", "holds no benchmark text of 8 words or more"),
        ("b.txt", b"two words", "it would decontaminate nothing"),
        ("b.jsonl.gz", b"not gzip", "b.jsonl.gz cannot be decompressed: Not a gzipped file"),
    ],
)
def test_benchmark_files_refused_at_load(tmp_path, name, content, message):
    path = tmp_path / (name or "missing.jsonl")
    if name == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(CurationError, match=message):
        chain.check([{"decontaminate": {"benchmarks": [str(path)]}}])


def test_benchmarks_may_be_one_file(tmp_path):
    (tmp_path / "b.jsonl").write_text(json.dumps({"q": LONG}) + "\n")
    chain.check([{"decontaminate": {"benchmarks": str(tmp_path / "b.jsonl")}}])
    f = step("decontaminate", benchmarks=str(tmp_path / "b.jsonl"))
    assert f.judge(f"prefix {LONG} suffix") is not None


def _config(tmp_path: Path, chain_: list) -> Path:
    raw = yaml.safe_load(SAMPLE_CONFIG.read_text())
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "hello"}\n')
    raw["input"]["uri"] = "in"
    raw["output"]["uri"] = "out"
    shutil.copy(TOKENIZER, tmp_path / "tokenizer.json")
    raw["tokenize"]["tokenizer"] = "tokenizer.json"
    raw["curate"] = chain_
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_load_config_refuses_a_chain_in_one_line_naming_the_key(tmp_path):
    path = _config(tmp_path, [{"pii": {}}, {"c4": {"bad_words_file": "bad.txt"}}])
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (f"{path}: key curate[1].c4: cannot read {tmp_path / 'bad.txt'}:"
                            " No such file or directory")  # fmt: skip
    (tmp_path / "bench.txt").write_text(LONG)
    path = _config(tmp_path, [{"decontaminate": {"benchmarks": "bench.txt"}}])
    cfg = load_config(path)  # one file, relative to the config's folder
    assert cfg.curate == [{"decontaminate": {"benchmarks": str(tmp_path / "bench.txt")}}]


# -- definitions ------------------------------------------------------------------------------
def test_gopher_stop_words_are_counted_distinct():
    # Finnish: "To" twice is one stop word; the paper asks for two of the eight
    finnish = ("Tämä on suomenkielinen teksti joka kertoo asioista hyvin selvästi. " * 6
               + "To ja To.")  # fmt: skip
    quality = step("gopher_quality")
    assert quality.judge(finnish) == "stop_words=1 < 2"
    english = finnish.replace("To ja To.", "To ja the.")
    assert quality.judge(english) is None
    assert quality(batch(finnish, english)).why == ["stop_words=1 < 2", None]  # compiled path


def test_gopher_duplicated_ngrams_count_from_the_second_occurrence():
    # a 9-word run said twice among 70 other words (all of 3 characters): its repeat is 9/88
    # of the characters, within every bound; counting its first occurrence too, 18/88
    run = [f"w{i:02d}" for i in range(9)]
    text = " ".join(run + [f"x{i:02d}" for i in range(70)] + run)
    rep = step("gopher_repetition", max_top_ngram_chars={})
    both = step("gopher_repetition", max_top_ngram_chars={}, dup_ngram_first_too=True)
    assert rep.judge(text) is None
    assert both.judge(text) == "dup_5gram_chars=0.205 > 0.15"
    assert rep(batch(text)).why == [None]  # the compiled path
    assert both(batch(text)).why == ["dup_5gram_chars=0.205 > 0.15"]



@pytest.mark.parametrize(
    "line",
    [
        "আমি বাংলায় গান গাই এবং আমি খুশি।",  # Bengali: danda
        "یہ ایک اردو جملہ ہے جو یہاں ختم ہوتا ہے۔",  # Urdu: full stop U+06D4
        "ይህ የአማርኛ ዓረፍተ ነገር ነው።",  # Amharic
        "ဒါက မြန်မာ စာကြောင်း တစ်ခု ဖြစ်ပါတယ်။",  # Burmese
        "នេះ​ជា​ប្រយោគ​ខ្មែរ​មួយ​ ។",  # Khmer: khan
        "འདི་ནི་བོད་ཡིག་གི་ཚིག་གྲུབ་ཡིན། །",  # Tibetan: shad
        "这是一个中文句子。",
    ],
)
def test_line_punctuation_covers_the_full_stops_of_other_scripts(line):
    text = "\n".join(f"{line[:-1]}{i}{line[-1]}" for i in range(8))  # distinct lines
    fw = step("fineweb_quality", max_short_lines=1.0, max_newlines_per_word=10)
    assert fw.judge(text) is None
    assert fw(batch(text)).why == [None]
    spans = Counter()
    assert step("c4_lines", min_words_per_line=1).rewrite(text, spans) == text and not spans


# -- config lists the steps -------------------------------------------------------------------
def test_config_lists_every_curation_step_with_its_parameters():
    text = config_reference.defaults_yaml()
    for name, cls in REGISTRY.items():
        assert f"#   {name} (" in text
        for key, field in cls.Params.model_fields.items():
            assert f"#     {key}: " in text, (name, key)
            assert field.description, f"{name}.{key} has no description"
    assert "#     min_stop_words: 2  # fewest distinct words" in text
    assert "#     benchmarks: (required)" in text
    md = config_reference.markdown()
    assert "### `gopher_repetition` (filter)" in md and "| `dup_ngram_first_too` | `false` |" in md



def test_a_changed_definition_reads_the_units_again(tmp_path, monkeypatch):
    """Units read under a step's earlier definition are not reused: its version is in the read
    key (and the output hash); a chain of unchanged steps keeps its keys."""
    path = _config(tmp_path, [{"gopher_quality": {}}])
    cfg = load_config(path)
    now = (cfg.read_key(), cfg.output_hash(), cfg.content_versions("read"))
    monkeypatch.setattr(REGISTRY["gopher_quality"], "DEFINITION", 1)
    before = (cfg.read_key(), cfg.output_hash(), cfg.content_versions("read"))
    assert now[0] != before[0] and now[1] != before[1]
    assert (now[2], before[2]) == ({"sample": {"gopher_quality": 2}}, {})
    plain = load_config(_config(tmp_path, [{"pii": {}}]))
    assert plain.content_versions("read") == {}
