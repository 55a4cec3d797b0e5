"""The `extract:` section of a run configuration: which engine turns a web page's HTML into the
document's text, and its options. Only web archives and .html files are extracted
(pipeline/ingest/web_archive.py); every other format is read as it is.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field

from pipeline.config.reuse_keys import changes
from pipeline.core.model import StrictModel

_READ = changes("read", "output")
# the listing's formats whose text is extracted from HTML: where no listed file has one, the
# `extract` section cannot change a byte and stays out of the keys (Config.unused_sections)
EXTRACTED_FORMATS = ("warc", "html")


class ExtractConfig(StrictModel):
    """resiliparse's extract_plain_text by default, with its defaults but main-content
    extraction on (DCLM's choice); trafilatura (the optional extra `trafilatura`) where
    chosen. The options are resiliparse's; trafilatura takes those it has (comments, links,
    preserve_formatting as include_comments, include_links, include_formatting)."""

    engine: Literal["resiliparse", "trafilatura"] = Field(
        default="resiliparse",
        description="what extracts a page's text: resiliparse (fast, DCLM's choice) or"
        " trafilatura (pip install 'pipeline[trafilatura]')",
        json_schema_extra=_READ,
    )
    main_content: bool = Field(
        default=True,
        description="keep the page's main content only (drop navigation, footers, boilerplate)",
        json_schema_extra=_READ,
    )
    preserve_formatting: bool = Field(
        default=True,
        description="keep line breaks between paragraphs, list items and block elements",
        json_schema_extra=_READ,
    )
    alt_texts: bool = Field(
        default=True, description="keep images' alt texts", json_schema_extra=_READ
    )
    links: bool = Field(default=False, description="keep link targets", json_schema_extra=_READ)
    list_bullets: bool = Field(
        default=True, description="mark list items with bullets", json_schema_extra=_READ
    )
    noscript: bool = Field(
        default=False, description="keep <noscript> content", json_schema_extra=_READ
    )
    comments: bool = Field(
        default=True,
        description="treat comment sections as main content",
        json_schema_extra=_READ,
    )
    form_fields: bool = Field(
        default=False, description="keep form fields and their values", json_schema_extra=_READ
    )



def check_engine(extract: ExtractConfig) -> None:
    """ValueError where the chosen engine is not installed: checked when a config loads (not
    by the model, so that a config stays valid data on a machine without the extra)."""
    if extract.engine == "trafilatura" and importlib.util.find_spec("trafilatura") is None:
        raise ValueError(
            "extract.engine is trafilatura, which is not installed:"
            " pip install 'pipeline[trafilatura]' (or use engine: resiliparse)"
        )
