"""The running-stack options every stack-starting benchmark command shares (benchmarks/stack.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.stack import add_running_arguments, open_stack, running_data_dir
from shared.errors import Unavailable


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_running_arguments(p)
    return p.parse_args(argv)


def test_use_running_names_the_data_dir_given_else_the_stacks_default(tmp_path, monkeypatch):
    assert running_data_dir(parse("--use-running", "--data-dir", str(tmp_path))) == tmp_path.resolve()
    monkeypatch.setenv("NUCLEUS_DATA_DIR", str(tmp_path / "default"))
    assert running_data_dir(parse("--use-running")) == (tmp_path / "default").resolve()


def test_use_running_without_a_stack_there_says_how_to_start_one_and_starts_none(tmp_path):
    with pytest.raises(Unavailable, match="nucleus up"):
        open_stack(parse("--use-running", "--data-dir", str(tmp_path)), tmp_path / "own")
    assert not (tmp_path / "own").exists()


def test_a_stack_state_file_that_is_not_one_is_refused(tmp_path: Path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "stack.json").write_text("{}")
    with pytest.raises(Unavailable, match="not a stack state file"):
        open_stack(parse("--use-running", "--data-dir", str(tmp_path)), tmp_path / "own")
