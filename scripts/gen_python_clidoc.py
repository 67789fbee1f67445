#!/usr/bin/env python3
"""Man page and bash/zsh/fish completions of the Python CLI `bessemer`, generated from its
own argparse parser (bessemer.cli._parser), so they never drift from `bessemer --help`.

    gen_python_clidoc.py man|bash|zsh|fish   > OUT
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime


def _parser() -> argparse.ArgumentParser:
    from bessemer.cli import _parser as make

    return make()


def _subparsers(p: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """name -> (help, parser) of p's subcommands, in declaration order."""
    out: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            for name, sub in a.choices.items():
                out[name] = (helps.get(name, ""), sub)
    return out


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in p._actions
        if a.option_strings
        and not isinstance(a, argparse._HelpAction)
        and a.help != argparse.SUPPRESS
    ]


def _positionals(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in p._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]


def _commands(p: argparse.ArgumentParser) -> list[tuple[list[str], str, argparse.ArgumentParser]]:
    """Every leaf command: (words, help, parser), e.g. (['show', 'module'], ...)."""
    out = []
    for name, (h, sub) in _subparsers(p).items():
        kids = _subparsers(sub)
        if kids:
            for kname, (kh, ksub) in kids.items():
                out.append(([name, kname], kh, ksub))
        else:
            out.append(([name], h, sub))
    return out


def _roff(s: str) -> str:
    s = s.replace("\\", "\\\\").replace("-", "\\-")
    return "\n".join(("\\&" + ln) if ln.startswith((".", "'")) else ln for ln in s.splitlines())


def _optline(a: argparse.Action) -> str:
    names = ", ".join(f"\\fB{_roff(o)}\\fR" for o in a.option_strings)
    if a.nargs != 0:
        names += f" \\fI{_roff(a.metavar or a.dest.upper())}\\fR"
    return names


def man() -> str:
    from bessemer import __version__

    p = _parser()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or None
    date = datetime.fromtimestamp(epoch, UTC) if epoch else datetime.now(UTC)
    lines = [
        f'.TH BESSEMER 1 "{date:%Y-%m-%d}" "bessemer {__version__}" "User Commands"',
        ".SH NAME",
        "bessemer \\- " + _roff(p.description or ""),
        ".SH SYNOPSIS",
        "\\fBbessemer\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIWHAT\\fR] [\\fIARGS\\fR]",
        ".SH DESCRIPTION",
        _roff(
            "The command-line client of bessemerd (and of BESS's bessd): bessctl's commands, "
            ".bess scripts, monitoring. It talks to the daemon's gRPC control port."
        ),
        ".SH OPTIONS",
    ]
    for a in _options(p):
        lines += [".TP", _optline(a), _roff(a.help or "")]
    lines.append(".SH COMMANDS")
    for words, h, sub in _commands(p):
        args = " ".join(f"\\fI{_roff(a.metavar or a.dest)}\\fR" for a in _positionals(sub))
        lines += [".TP", f"\\fB{' '.join(words)}\\fR {args}".rstrip(), _roff(h)]
        for a in _options(sub):
            lines += [".RS", ".TP", _optline(a), _roff(a.help or ""), ".RE"]
    lines += [
        ".SH ENVIRONMENT",
        "None; the daemon's address comes from \\fB\\-\\-host\\fR/\\fB\\-\\-port\\fR/\\fB\\-\\-unix\\fR.",
        ".SH SEE ALSO",
        "\\fBbessemerd\\fR(1), \\fBbessemer\\-controller\\fR(1)",
    ]
    return "\n".join(lines) + "\n"


def bash() -> str:
    p = _parser()
    top = _subparsers(p)
    opts = " ".join(o for a in _options(p) for o in a.option_strings)
    cases = []
    for name, (_, sub) in top.items():
        kids = " ".join(_subparsers(sub))
        subopts = " ".join(
            o for k in _subparsers(sub).values() for a in _options(k[1]) for o in a.option_strings
        )
        cases.append(
            f'        {name}) words2="{kids}"; opts2="{" ".join(sorted(set(subopts.split())))}" ;;'
        )
    return f"""# bash completion for bessemer (generated from its argparse parser)
_bessemer() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" i words2="" opts2=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${{COMP_WORDS[i]}} in
            -*) ;;
            *) cmd=${{COMP_WORDS[i]}}; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "{" ".join(top)} {opts}" -- "$cur"))
        return
    fi
    case $cmd in
{chr(10).join(cases)}
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts2" -- "$cur"))
    elif [[ $((COMP_CWORD - i)) -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$words2" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -F _bessemer bessemer
"""


def zsh() -> str:
    p = _parser()
    top = _subparsers(p)
    q = lambda s: s.replace("'", "'\\''").replace(":", "\\:")
    topdesc = " ".join(f"'{n}:{q(h)}'" for n, (h, _) in top.items())
    cases = []
    for name, (_, sub) in top.items():
        kids = " ".join(f"'{k}:{q(h)}'" for k, (h, _) in _subparsers(sub).items())
        if kids:
            cases.append(f"        {name}) local -a w; w=({kids}); _describe 'what' w ;;")
    opts = " ".join(f"'{o}[{q(a.help or '')}]'" for a in _options(p) for o in a.option_strings)
    return f"""#compdef bessemer
# zsh completion for bessemer (generated from its argparse parser)
_bessemer() {{
    local -a cmds
    cmds=({topdesc})
    if (( CURRENT == 2 )) || [[ ${{words[2]}} == -* && CURRENT -le 3 ]]; then
        _arguments -s {opts} '*::command:->cmd'
        _describe 'command' cmds
        return
    fi
    case ${{words[2]}} in
{chr(10).join(cases)}
        *) _files ;;
    esac
}}
_bessemer "$@"
"""


def fish() -> str:
    p = _parser()
    top = _subparsers(p)
    q = lambda s: s.replace("\\", "\\\\").replace("'", "\\'")
    lines = [
        "# fish completion for bessemer (generated from its argparse parser)",
        "complete -c bessemer -f",
    ]
    for a in _options(p):
        for o in a.option_strings:
            if o.startswith("--"):
                r = " -r" if a.nargs != 0 else ""
                lines.append(
                    f"complete -c bessemer -n __fish_use_subcommand -l {o[2:]}{r} -d '{q(a.help or '')}'"
                )
    names = " ".join(top)
    for name, (h, sub) in top.items():
        lines.append(
            f"complete -c bessemer -n 'not __fish_seen_subcommand_from {names}' -a {name} -d '{q(h)}'"
        )
        kids = _subparsers(sub)
        kidnames = " ".join(kids)
        for k, (kh, ksub) in kids.items():
            lines.append(
                f"complete -c bessemer -n '__fish_seen_subcommand_from {name}; and not __fish_seen_subcommand_from {kidnames}' -a {k} -d '{q(kh)}'"
            )
            for a in _options(ksub):
                for o in a.option_strings:
                    if o.startswith("--"):
                        lines.append(
                            f"complete -c bessemer -n '__fish_seen_subcommand_from {k}' -l {o[2:]} -d '{q(a.help or '')}'"
                        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    kinds = {"man": man, "bash": bash, "zsh": zsh, "fish": fish}
    if len(argv) != 1 or argv[0] not in kinds:
        print("usage: gen_python_clidoc.py man|bash|zsh|fish", file=sys.stderr)
        return 2
    sys.stdout.write(kinds[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
