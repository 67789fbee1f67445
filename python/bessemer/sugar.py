"""Translate BESS script syntax into plain Python.

A `.bess` script is Python plus BESS's additions:

* ``name::Class(args)`` creates a module named ``name`` and binds the variable ``name``;
* ``a -> b`` connects output gate 0 of ``a`` to input gate 0 of ``b``; chains are allowed;
* ``a:1 -> 0:b`` names the output and input gates;
* ``$VAR`` and ``$VAR!default`` read the environment variable ``VAR``.

The translation works on tokens and edits each line in place, so a Python error in the
translated script points at the same file, line and column as in the original.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass

ENV_FUNC = "__bess_env__"


class SugarError(SyntaxError):
    """A BESS-specific syntax error, located in the original script."""


@dataclass
class _Edit:
    row: int
    start: int
    end: int
    text: str


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(source).readline))
    except tokenize.TokenError as exc:  # unterminated bracket or string
        msg, (row, col) = exc.args
        raise SugarError(msg, ("<script>", row, col + 1, "")) from None


def _is_op(tok: tokenize.TokenInfo, s: str) -> bool:
    return tok.type == tokenize.OP and tok.string == s


def _is_error(tok: tokenize.TokenInfo, s: str) -> bool:
    return tok.type in (tokenize.ERRORTOKEN, tokenize.OP) and tok.string == s


def _adjacent(a: tokenize.TokenInfo, b: tokenize.TokenInfo) -> bool:
    return a.end == b.start


def _matching_paren(toks: list[tokenize.TokenInfo], i: int) -> int:
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].type == tokenize.OP and toks[j].string in "([{":
            depth += 1
        elif toks[j].type == tokenize.OP and toks[j].string in ")]}":
            depth -= 1
            if depth == 0:
                return j
    raise SugarError(
        "unbalanced parenthesis", ("<script>", toks[i].start[0], toks[i].start[1] + 1, "")
    )


def translate(source: str, filename: str = "<script>") -> str:
    """Returns the Python equivalent of a BESS script (same lines, same line numbers)."""
    toks = _tokens(source)
    edits: list[_Edit] = []

    def replace(first: tokenize.TokenInfo, last: tokenize.TokenInfo, text: str) -> None:
        if first.start[0] != last.end[0]:
            raise SugarError(
                "BESS syntax may not span lines here",
                (filename, first.start[0], first.start[1] + 1, ""),
            )
        edits.append(_Edit(first.start[0], first.start[1], last.end[1], text))

    def insert(row: int, col: int, text: str) -> None:
        edits.append(_Edit(row, col, col, text))

    i = 0
    n = len(toks)
    in_def = False  # a `def` line: its `->` is a return annotation, not a connection
    line_start = True
    while i < n:
        t = toks[i]
        if t.type == tokenize.NEWLINE or (t.type == tokenize.NL and not in_def):
            in_def = False
            line_start = True
            i += 1
            continue
        if t.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
            i += 1
            continue
        if line_start and t.type == tokenize.NAME and t.string in ("def", "async"):
            in_def = True
        line_start = False
        if in_def and not _is_error(t, "$"):
            # `$VAR` still reads the environment in a `def` line (a default argument).
            i += 1
            continue
        # $VAR or $VAR!default
        if _is_error(t, "$"):
            if i + 1 >= n or toks[i + 1].type != tokenize.NAME or not _adjacent(t, toks[i + 1]):
                raise SugarError(
                    "'$' must be followed by a variable name",
                    (filename, t.start[0], t.start[1] + 1, ""),
                )
            name = toks[i + 1].string
            last = toks[i + 1]
            default = None
            if i + 2 < n and _is_error(toks[i + 2], "!"):
                j = i + 3
                if (
                    j < n
                    and _is_op(toks[j], "-")
                    and j + 1 < n
                    and toks[j + 1].type == tokenize.NUMBER
                ):
                    default = "-" + toks[j + 1].string
                    last = toks[j + 1]
                    i = j + 2
                elif j < n and toks[j].type in (tokenize.STRING, tokenize.NUMBER, tokenize.NAME):
                    default = toks[j].string
                    last = toks[j]
                    i = j + 1
                else:
                    raise SugarError(
                        f"'${name}!' must be followed by a default value",
                        (filename, t.start[0], t.start[1] + 1, ""),
                    )
            else:
                i += 2
            args = repr(name) if default is None else f"{name!r}, {default}"
            replace(t, last, f"{ENV_FUNC}({args})")
            continue
        # name::Class(args)  →  (name := Class(args, name='name'))
        if (
            t.type == tokenize.NAME
            and i + 3 < n
            and _is_op(toks[i + 1], ":")
            and _is_op(toks[i + 2], ":")
            and _adjacent(toks[i + 1], toks[i + 2])
            and toks[i + 3].type == tokenize.NAME
            and toks[i + 3].string[:1].isupper()
        ):
            name, cls = t.string, toks[i + 3]
            replace(t, toks[i + 2], f"({name} := ")
            if i + 4 < n and _is_op(toks[i + 4], "(") and _adjacent(cls, toks[i + 4]):
                close = _matching_paren(toks, i + 4)
                empty = close == i + 5
                trailing_comma = _is_op(toks[close - 1], ",")
                sep = "" if empty or trailing_comma else ", "
                ct = toks[close]
                insert(ct.start[0], ct.start[1], f"{sep}name={name!r}")
                insert(ct.end[0], ct.end[1], ")")
                i += 4
            else:
                insert(cls.end[0], cls.end[1], f"(name={name!r}))")
                i += 4
            continue
        # a:1 -> ...   (output gate)
        if (
            _is_op(t, ":")
            and i + 2 < n
            and toks[i + 1].type in (tokenize.NUMBER, tokenize.NAME)
            and _is_op(toks[i + 2], "->")
        ):
            replace(t, t, " * ")
            i += 1
            continue
        # ... -> 0:b   (input gate)
        if _is_op(t, "->"):
            replace(t, t, ">>")
            if (
                i + 2 < n
                and toks[i + 1].type in (tokenize.NUMBER, tokenize.NAME)
                and _is_op(toks[i + 2], ":")
                and not (
                    i + 3 < n and _is_op(toks[i + 3], ":") and _adjacent(toks[i + 2], toks[i + 3])
                )
            ):
                replace(toks[i + 2], toks[i + 2], " * ")
                i += 3
                continue
        i += 1

    lines = source.splitlines(keepends=True)
    for e in sorted(edits, key=lambda e: (e.row, e.start, e.end), reverse=True):
        line = lines[e.row - 1]
        lines[e.row - 1] = line[: e.start] + e.text + line[e.end :]
    return "".join(lines)
