"""The `extract` section enters the reuse keys only where the listing holds files whose text is
extracted (web archives, .html): a dataset of other formats keeps the keys it had before the
section existed; on a crawl every extract option changes the read key, the token key and the
run key (Config.unused_sections, reuse_keys.stage_data)."""

from __future__ import annotations

import pytest
from support import SAMPLE_CONFIG

from pipeline.config import reuse_keys
from pipeline.config.loader import load_config
from pipeline.config.model import Config
from pipeline.extract.config import ExtractConfig

STAGES = ("read", "output")


def keys(cfg: Config) -> dict[str, str]:
    return {**cfg.stage_keys(), "run": cfg.output_hash()}


def with_extract(cfg: Config, **options) -> Config:
    return cfg.model_copy(update={"extract": ExtractConfig(**options)})


# every extract option changed from its default
CHANGES = [
    {"main_content": False},
    {"preserve_formatting": False},
    {"alt_texts": False},
    {"links": True},
    {"list_bullets": False},
    {"noscript": True},
    {"comments": False},
    {"form_fields": True},
]


@pytest.fixture(scope="module")
def sample() -> Config:
    return load_config(SAMPLE_CONFIG)


@pytest.mark.parametrize("formats", [["jsonl"], ["jsonl", "parquet", "text"], []])
def test_without_web_archives_the_extract_section_is_in_no_key(sample, formats):
    listed = sample.for_listing(0, formats)
    for stage in STAGES:
        data = reuse_keys.stage_data(listed, stage)
        assert "extract" not in data
        # what the keys hash is the config less that section: as before the section existed
        assert data == {
            k: v for k, v in reuse_keys.stage_data(sample, stage).items() if k != "extract"
        }
    assert "extract" not in listed.output_config()  # nor in the manifest's `config`
    for change in CHANGES:
        assert keys(with_extract(sample, **change).for_listing(0, formats)) == keys(listed)


@pytest.mark.parametrize("formats", [["warc"], ["html"], ["jsonl", "warc"]])
def test_with_web_archives_every_extract_option_changes_every_key(sample, formats):
    listed = sample.for_listing(0, formats)
    assert listed.output_config()["extract"] == ExtractConfig().model_dump(mode="json")
    before = keys(listed)
    for change in CHANGES:
        after = keys(with_extract(sample, **change).for_listing(0, formats))
        assert {k for k in after if after[k] != before[k]} == {"read", "tokens", "run"}, change


def test_a_config_not_sized_by_a_listing_names_a_run_without_web_archives(sample):
    """Before a listing none is assumed: a layout from the config alone (RunLayout.for_config)
    names the run of a JSONL corpus the run itself keyed after its listing."""
    assert "extract" not in reuse_keys.stage_data(sample, "read")
    assert keys(sample) == keys(sample.for_listing(0, ["jsonl"]))
    assert keys(with_extract(sample, links=True)) == keys(sample)


def test_the_listing_decides_whether_the_section_counts(sample):
    assert keys(sample.for_listing(0, ["warc"])) != keys(sample.for_listing(0, ["jsonl"]))
    assert keys(sample.for_listing(0, ["jsonl"])) == keys(sample)
