"""A page's text from its HTML, by the configured engine (extract/config.py). Pure: text in,
text out. trafilatura is imported only when chosen (an optional extra)."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.extract.config import ExtractConfig


def extractor(cfg: ExtractConfig) -> Callable[[str], str]:
    """The function from HTML to the document's text ("" when the page has none)."""
    if cfg.engine == "trafilatura":
        return _trafilatura(cfg)
    from resiliparse.extract.html2text import extract_plain_text

    options = {
        "main_content": cfg.main_content,
        "preserve_formatting": cfg.preserve_formatting,
        "alt_texts": cfg.alt_texts,
        "links": cfg.links,
        "list_bullets": cfg.list_bullets,
        "noscript": cfg.noscript,
        "comments": cfg.comments,
        "form_fields": cfg.form_fields,
    }

    def resiliparse(html: str) -> str:
        return extract_plain_text(html, **options)

    return resiliparse


def _trafilatura(cfg: ExtractConfig) -> Callable[[str], str]:
    import trafilatura

    def extract(html: str) -> str:
        text = trafilatura.extract(
            html,
            include_comments=cfg.comments,
            include_links=cfg.links,
            include_formatting=cfg.preserve_formatting,
            favor_recall=not cfg.main_content,
        )
        return text or ""

    return extract
