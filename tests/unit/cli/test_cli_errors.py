"""One error vocabulary, said in one line: the CLI refuses a `--top-k` the service does not take
(0 is not silently "the default"), prints an error raised inside a task group as its one line,
and docs/MCP.md lists every error kind the product answers with."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli import main as cli_main
from shared.errors import InvalidArgument, NucleusError

ROOT = Path(__file__).resolve().parents[3]


def every_kind() -> set[str]:
    kinds, pending = set(), [NucleusError]
    while pending:
        cls = pending.pop()
        kinds.add(cls.kind)
        pending.extend(cls.__subclasses__())
    return kinds


@pytest.mark.parametrize("top_k", ["0", "-3"])
def test_search_refuses_a_top_k_below_one_naming_the_flag_and_the_range(tmp_path, capsys, top_k):
    code = cli_main.main(["--data-dir", str(tmp_path), "search", "x", "--tenant", "demo", "--top-k", top_k])
    err = " ".join(capsys.readouterr().err.split())
    assert code == InvalidArgument.exit_code
    assert f"invalid_argument: --top-k: must be between 1 and 100 (leave it out for 10), got {top_k}" in err


def test_an_error_of_ours_inside_a_task_group_is_one_line_with_its_exit_code(capsys, monkeypatch):
    def failing(args):
        raise ExceptionGroup("unhandled errors in a TaskGroup", [InvalidArgument("SOME_SETTING", "must be 1")])

    parser = cli_main.build_parser
    monkeypatch.setattr(cli_main, "build_parser", lambda: _with_func(parser(), failing))
    assert cli_main.main(["down"]) == InvalidArgument.exit_code
    err = capsys.readouterr().err
    assert "invalid_argument: SOME_SETTING: must be 1" in " ".join(err.split()) and "Traceback" not in err


def test_a_bug_inside_a_task_group_keeps_its_traceback(monkeypatch):
    def failing(args):
        raise ExceptionGroup("unhandled errors in a TaskGroup", [InvalidArgument("x", "y"), KeyError("bug")])

    parser = cli_main.build_parser
    monkeypatch.setattr(cli_main, "build_parser", lambda: _with_func(parser(), failing))
    with pytest.raises(ExceptionGroup):
        cli_main.main(["down"])


def _with_func(parser, func):
    parser.set_defaults(func=func)
    for action in parser._subparsers._group_actions:          # the subcommand's default wins otherwise
        for sub in action.choices.values():
            sub.set_defaults(func=func)
    return parser


def test_mcp_md_lists_every_error_kind():
    text = (ROOT / "docs" / "MCP.md").read_text()
    vocabulary = text[text.index("A tool error's text starts with its kind"):]
    vocabulary = vocabulary[:vocabulary.index("\n\n")]
    listed = set(re.findall(r"`([a-z_]+)`", vocabulary))
    assert every_kind() <= listed, every_kind() - listed
