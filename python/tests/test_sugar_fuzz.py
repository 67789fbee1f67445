"""The `.bess` translator on arbitrary text (Hypothesis): it answers Python source or a
SugarError / SyntaxError located in the script, never another exception, and the source it
answers keeps the script's line count (errors point at the right line)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bessemer.sugar import translate

# Text made of the pieces BESS's syntax is built from, plus arbitrary characters.
PIECES = st.sampled_from(
    [
        "a", "b", "src", "::", "->", ":", "0", "1", "(", ")", "[", "]", "{", "}", ",", "=",
        "$X", "$Y!'d'", "!", "'s'", '"t"', "\n", " ", "    ", "#", "Source", "Sink()",
        "bess.", "\\", "\t", "\r\n", "'''", "lambda", "x:y", "-", ">",
    ]
)  # fmt: skip
SCRIPTS = st.one_of(
    st.lists(PIECES, max_size=40).map("".join),
    st.text(max_size=200),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCRIPTS)
def test_translate_answers_source_or_a_located_syntax_error(script):
    try:
        out = translate(script, "fuzz.bess")
    except SyntaxError as exc:  # SugarError is a SyntaxError
        assert exc.lineno is None or 0 <= exc.lineno <= script.count("\n") + 2
        return
    assert isinstance(out, str)
    assert out.count("\n") == script.replace("\r\n", "\n").count("\n") or not script
