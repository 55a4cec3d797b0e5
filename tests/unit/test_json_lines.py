"""JSON Lines parsing (ingest/format_readers._loads): orjson where it returns what json.loads
would, json.loads everywhere else, so the records and quarantine reasons never depend on which
parser read a line."""

from __future__ import annotations

import json

import pytest

from pipeline.ingest.format_readers import _STRICT_FAILED, _add_json_line, _loads
from pipeline.ingest.records import INVALID_UTF8, Batches

NAMES = ("text", "id", "lang")  # the fields a read uses: text, id, one kept field

LINES = [
    b'{"id": 1, "text": "plain"}',
    b'{"id": 18446744073709551615, "text": "the largest unsigned 64-bit id"}',
    b'{"id": -9223372036854775808, "text": "the smallest signed 64-bit id"}',
    b'{"id": 123456789012345678901234567890, "text": "an id past 64 bits"}',
    b'{"id": -9223372036854775809, "text": "just past 64 bits, negative"}',
    b'{"id": "a", "text": "x", "lang": 99999999999999999999999}',
    b'{"id": [1, 123456789012345678901234567890], "text": "a list id hides one"}',
    b'{"id": "a", "text": "x", "score": 123456789012345678901234567890}',
    b'{"id": 1.5, "text": "a float id"}',
    b"123456789012345678901234567890",
    b'[{"id": 1, "text": "a"}, {"id": 123456789012345678901234567890, "text": "b"}]',
    b'{"id": "a", "text": "x", "v": 1e400}',
    b'{"id": "a", "text": "x", "v": NaN}',
    b'{"id": "a", "text": "half a pair \\ud800"}',
    b'{"id": "a", "text": "a pair \\ud83d\\ude00"}',
    b'{"id": "a", "id": "b", "text": "the last key wins"}',
    b'{"id": "a", "text": "caf\xc3\xa9 \\u00e9 \\u0000 \x7f"}',
    b' {"id": -0, "text": "x", "lang": -0.0} \r\n',
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_parses_to_what_json_loads_gives(line: bytes) -> None:
    expected = json.loads(line.decode("utf-8"))
    got = _loads(line, NAMES)
    if got is _STRICT_FAILED:  # the reader then calls json.loads itself
        return
    # json.dumps tells 1 from 1.0 and True, and keeps key order: the same text is the same value
    assert json.dumps(used(got)) == json.dumps(used(expected))


def used(value):
    """What the reader takes from a parsed line: the named fields of each record."""
    if isinstance(value, list):
        return [used(v) for v in value]
    if isinstance(value, dict):
        return {name: value.get(name) for name in NAMES}
    return value


def test_what_orjson_rounds_or_rejects_goes_to_json_loads() -> None:
    """Not a tautology of the test above: these lines must not take the fast path, whose
    values would differ (a rounded id) or which cannot read them at all."""
    past_64_bits = [LINES[3], LINES[4], LINES[5], LINES[6], LINES[9], LINES[10]]
    rejected = [LINES[11], LINES[12], LINES[13], b'{"text": "\xff"}', b'{"text": 1,}']
    for line in past_64_bits + rejected:
        assert _loads(line, NAMES) is _STRICT_FAILED, line
    # a big integer in a field the read does not use is harmless: the fast path keeps it
    assert _loads(LINES[7], NAMES) is not _STRICT_FAILED
    assert _loads(LINES[0], NAMES) == {"id": 1, "text": "plain"}


def test_blank_lines_skipped_and_only_lone_surrogates_quarantined() -> None:
    """A line of any ASCII whitespace is no record; one that starts with whitespace is; escapes
    of real characters (which orjson reads) keep their record; a lone surrogate (which only
    json.loads reads) is quarantined, in the text and in the id."""
    lines = [
        b"\n",
        b" \t\r\x0b\x0c\n",
        b"",
        b' \t{"id": "a", "text": "x"}\n',
        b'{"id": "b", "text": "caf\\u00e9 \\ud83d\\ude00"}\n',
        b'{"id": "c", "text": "half a pair \\ud800"}\n',
        b'{"id": "\\udfff", "text": "the id is the lone half"}\n',
        b'[{"id": "d", "text": "y"}, {"id": "e", "text": "\\udc00"}]\n',
    ]
    out, offset = Batches("s.jsonl", 100, 1 << 20, ()), 0
    for line in lines:
        _add_json_line(out, line, offset, ("text", "id"))
        offset += len(line)
    docs, bad = out.take()
    assert docs["doc_id"].to_pylist() == ["a", "b", "d"]
    assert docs["text"].to_pylist() == ["x", "caf\u00e9 \U0001f600", "y"]
    assert bad["reason"].to_pylist() == [INVALID_UTF8] * 3


def test_a_text_of_whitespace_only_is_empty_text_and_any_other_is_kept_whole():
    """str.isspace's whitespace (Unicode's too) makes an empty text; a text with anything else
    is the document as it came, its edge whitespace kept."""
    from pipeline.ingest.records import EMPTY_TEXT, Rejected, document_fields

    for blank in ["", " ", "\n\t\r", "\u3000\xa0\u2028", "\x1c\x1f \x85"]:
        with pytest.raises(Rejected) as e:
            document_fields(blank, None)
        assert e.value.reason == EMPTY_TEXT and e.value.detail.startswith(f"{len(blank)} ")
    for text in ["a", " a\n", "\u3000x\u3000", "\x00", "\n\n.\n"]:
        assert document_fields(text, 7) == ("7", text)
