"""C4's rules (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", section 2.2): a line cleaner and a document filter.

`c4_lines` (transform) keeps only the lines that end in terminal punctuation (a sentence end
of any script, text.SENTENCE_ENDS, or a closing quote), hold at least
three words, and mention neither "javascript" nor a cookie or policy notice; it counts the lines
it drops by rule. `c4` (filter) removes a document with "lorem ipsum", a curly bracket, a word
of the bad-word list (a file: one word or phrase a line, matched lower-case on word
boundaries), or fewer than five sentences (runs ending in . ! or ? followed by whitespace or the
end). Run `c4_lines` before `c4` for the paper's pipeline: the sentences are then counted in the
cleaned page. Contract: as curate/base.py; the bad-word file's content is in the reuse key.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import islice

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.core.model import StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, Transform, Verdicts, below, local_text, register
from pipeline.curate.doc_stats import SCAN, DocStats

# C4's . ! ? and closing quote, with the sentence ends of every script (text.SENTENCE_ENDS:
# Unicode's Sentence_Terminal and the full stops it leaves out, e.g. । ۔ 。)
TERMINAL = (*t.SENTENCE_ENDS, '"', "”")
POLICY = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


class LinesParams(StrictModel):
    min_words_per_line: int = Field(
        3, ge=0,
        description='fewest words a kept line holds',
    )
    terminal_punctuation: tuple[str, ...] = Field(
        TERMINAL,
        description="a kept line ends with one of these (default: the sentence ends of every "
                    "script, text.SENTENCE_ENDS, and closing quotes)",
    )
    drop_javascript: bool = Field(
        True,
        description="drop lines mentioning 'javascript'",
    )
    policy_phrases: tuple[str, ...] = Field(
        POLICY,
        description='drop lines holding one of these (lower-cased)',
    )


@register
class C4Lines(Transform):
    """C4's line cleaning: what is left of a page is its lines of running text."""

    name = "c4_lines"
    DEFINITION = 2  # issue 43: sentence ends of every script
    Params = LinesParams

    def rewrite(self, text: str, spans: Counter) -> str:
        p: LinesParams = self.params
        kept = []
        for line in text.split("\n"):
            if not line.strip():  # no running text: dropped, not counted
                continue
            rule = self._drops(line.strip(), p)
            if rule is None:
                kept.append(line)
            else:
                spans[rule] += 1
        return "\n".join(kept)

    @staticmethod
    def _drops(line: str, p: LinesParams) -> str | None:
        lower = line.lower()
        if not line.endswith(p.terminal_punctuation):
            return "no_terminal_punctuation"
        if len(t.words(line)) < p.min_words_per_line:
            return "short_line"
        if p.drop_javascript and "javascript" in lower:
            return "javascript"
        if any(phrase in lower for phrase in p.policy_phrases):
            return "policy"
        return None


class C4Params(StrictModel):
    min_sentences: int = Field(
        5, ge=0,
        description='fewest sentences (runs of . ! ? followed by whitespace or the end)',
    )
    drop_lorem_ipsum: bool = Field(
        True,
        description="remove documents holding 'lorem ipsum'",
    )
    drop_curly_bracket: bool = Field(
        True,
        description="remove documents holding '{'",
    )
    bad_words_file: str | None = Field(
        None,
        description="a UTF-8 file of words and phrases, one a line: a document holding one (whole"
                    " words, lower-cased) is removed; null: none",
    )


@register
class C4(Filter):
    """C4's page rules: placeholder text, code, bad words, too few sentences."""

    name = "c4"
    Params = C4Params

    def __init__(self, params: C4Params) -> None:
        super().__init__(params)
        self._bad = _word_list(params.bad_words_file) if params.bad_words_file else None

    @classmethod
    def files_for(cls, params: C4Params) -> list[str]:
        return [params.bad_words_file] if params.bad_words_file else []

    @classmethod
    def check(cls, params: C4Params) -> None:
        if params.bad_words_file:
            _word_list(params.bad_words_file)

    def judge(self, text: str) -> str | None:
        p: C4Params = self.params
        lower = text.lower()
        if p.drop_lorem_ipsum and "lorem ipsum" in lower:
            return "lorem_ipsum"
        if p.drop_curly_bracket and "{" in text:
            return "curly_bracket"
        if self._bad is not None:
            found = self._bad.search(lower)
            if found:
                return f"bad_word={found.group(0)!r}"
        # counting stops at the bound: a shorter count is the whole count, as the reason says
        sentences = sum(1 for _ in islice(_SENTENCE_END.finditer(text), p.min_sentences))
        return below("sentences", sentences, p.min_sentences)

    def needs(self) -> list[tuple] | None:
        """What `decide` reads from a DocStats (None: judge reads the text, without numba)."""
        from pipeline.curate import measures  # numba: imported where a document is scored

        return [SCAN] if measures.available() else None

    def decide(self, stats: DocStats) -> Verdicts:
        """judge's reasons: "lorem ipsum" looked for (case-folded, by Arrow) in every text,
        confirmed in the lower-cased text of those holding it; "{" by Arrow; sentence ends
        counted in the measured words (a run of . ! ? followed by whitespace or the end ends
        a word, and a word ending in one of them ends with such a run)."""
        p: C4Params = self.params
        texts = stats.texts
        (scan,) = stats.get(SCAN)
        n = len(texts)
        lorem = _matches(texts, "(?i)lorem ipsum") if p.drop_lorem_ipsum else [False] * n
        curly = _matches(texts, r"\{") if p.drop_curly_bracket else [False] * n
        read = any(lorem) or self._bad is not None
        plain = texts.to_pylist() if read else [None] * n
        why: list[str | None] = []
        for text, maybe_lorem, bracket, ends in zip(plain, lorem, curly, scan[:, 3].tolist(),
                                                     strict=True):  # fmt: skip
            if maybe_lorem and "lorem ipsum" in text.lower():
                why.append("lorem_ipsum")
            elif bracket:
                why.append("curly_bracket")
            elif self._bad is not None and (found := self._bad.search(text.lower())):
                why.append(f"bad_word={found.group(0)!r}")
            else:
                sentences = min(ends, p.min_sentences)
                why.append(below("sentences", sentences, p.min_sentences))
        return Verdicts(why)

    def __call__(self, batch: pa.Table) -> Verdicts:
        if self.needs() is None:
            return super().__call__(batch)
        return self.decide(DocStats(batch["text"]))


def _matches(texts: pa.Array | pa.ChunkedArray, pattern: str) -> list[bool]:
    return pc.match_substring_regex(texts, pattern).to_pylist()


def _word_list(path: str) -> re.Pattern[str] | None:
    """One alternation of the file's words and phrases (lower-cased, on word boundaries);
    CurationError where the file cannot be read as UTF-8 text."""
    entries = [line.strip().lower() for line in local_text(path).splitlines()]
    entries = sorted({e for e in entries if e}, key=len, reverse=True)
    if not entries:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, entries)) + r")(?!\w)")
