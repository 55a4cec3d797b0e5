"""The extraction step's configuration (pipeline/extract): the engine and its options."""

from __future__ import annotations

import importlib.util

import pytest
from support import SAMPLE_CONFIG

from pipeline.cli import exit_codes
from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.extract.html import extractor

PAGE = (
    "<html><body><nav><ul><li>Home</li><li>Products</li><li>Contact</li></ul></nav>"
    "<article><h1>Rivers</h1><p>The river runs through the valley and feeds the lake below"
    " it, and the town drinks from the lake.</p><p>Fish swim upstream every spring to lay"
    " their eggs in the gravel.</p></article><footer>Copyright 2024 Example Inc</footer>"
    "</body></html>"
)


def config(*sets: str):
    return load_config(SAMPLE_CONFIG, output_uri="/tmp/unused", overrides=list(sets))


def test_main_content_by_default_and_the_whole_page_when_off():
    main = extractor(config().extract)(PAGE)
    whole = extractor(config("extract.main_content=false").extract)(PAGE)
    assert "The river runs" in main and "Products" not in main
    assert "The river runs" in whole and "Products" in whole


@pytest.mark.skipif(
    importlib.util.find_spec("trafilatura") is not None, reason="trafilatura is installed"
)
def test_trafilatura_chosen_but_not_installed_is_a_config_error():
    with pytest.raises(ConfigError) as e:
        config("extract.engine=trafilatura")
    assert "pipeline[trafilatura]" in str(e.value) and "extract" in str(e.value)
    assert e.value.exit_code == exit_codes.CONFIG_ERROR == 2


def test_an_unknown_engine_is_a_config_error():
    with pytest.raises(ConfigError, match="extract.engine"):
        config("extract.engine=lynx")
