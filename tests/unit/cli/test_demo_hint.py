"""`nucleus demo` ends with commands that reach the stack it started, also on another --data-dir."""
from __future__ import annotations

from cli.demo import demo_hint
from cli.main import build_parser


def test_the_demo_hint_stops_the_stack_it_started():
    assert "make down" in demo_hint(None)
    hint = demo_hint("stacks/other one")
    assert "make down" not in hint and ".venv/bin/nucleus --data-dir 'stacks/other one' down" in hint
    args = build_parser().parse_args(["--data-dir", "stacks/other one", "down"])     # the command it names parses
    assert args.data_dir == "stacks/other one" and args.command == "down"
