"""is_json_prefix: what a JSON grammar guarantees of an answer max_tokens cut, and what it never allows."""

from __future__ import annotations

import json

import pytest

from builder.measure._json_prefix import is_json_prefix

#: The int8 arm's JSON-mode answer on the H200, random weights (first 200 characters as the gate kept them).
H200_ANSWER = '{"]["\n\n       \n\n       \n\n       \n\n       \n\n       \n\n       \n\n       \n\n       \n\n       \n\n       \n\n       \n       \r\n   \n\n       \n       \r\n     \r\n   \n\n       \n       \r\n   \n\n       \n       \r\n   \n\n       \n'


@pytest.mark.parametrize("text", [
    H200_ANSWER, "", "  ", "{", '{"name', '{"name": "Tom', '{"a": 1', '{"a": 1.', '{"a": 1.5e', '{"a": -',
    '{"a": tru', '{"a": nul', '{"a": [1, 2,', '{"a": {"b": [', '{"a": "\\u00', '{"a": "x\\', '{"a": {}, "b": []}  ',
])
def test_the_start_of_a_json_document_is_a_prefix(text):
    assert is_json_prefix(text)


@pytest.mark.parametrize("text", [
    '{"a" 1', "{]", '{"a": 1}}', '{"a": 01}', "[01", "[.5", '{"a": nulx', '{"a": "\\x"', '{"a\n"', "{'a': 1}",
    '{"a": 1,}', "[1 2]", '{1: 2}', 'x', '{"a": 1} x',
])
def test_what_no_json_document_starts_with_is_refused(text):
    """Control: a grammar that failed (or no grammar) writes these; the gate must not pass them."""
    assert not is_json_prefix(text)


@pytest.mark.parametrize("doc", [{"name": "Tom", "age": 3}, [1, -2.5e3, True, None, "\\\"\u00e9"], {"a": {"b": [{}, []]}}])
def test_every_cut_of_a_real_document_is_a_prefix(doc):
    text = json.dumps(doc, indent=1, ensure_ascii=True)
    assert all(is_json_prefix(text[:i]) for i in range(len(text) + 1))
