"""`nucleus check`'s exit codes (cli/status.py CHECK_EXIT_CODES) are all documented: the table in
docs/OPERATIONS.md and the --help epilog list exactly them, and every way the command can end
(a result, an error kind of shared.errors, bad arguments, Ctrl-C) exits with one of them."""
from __future__ import annotations

import re

import pytest

import cli.status
from cli.main import main
from cli.status import CHECK_EXIT_CODES
from services.knowledge_store.models import TenantCheck
from shared import errors
from tests.support.observability import OPERATIONS_DOC


def _documented() -> dict[int, str]:
    section = OPERATIONS_DOC.read_text().split("`nucleus check` exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(code): meaning for code, meaning in re.findall(r"^\| (\d+) \| (.*) \|$", section, re.M)}


def _error_kinds(cls: type = errors.NucleusError) -> set[type]:
    return {cls}.union(*(_error_kinds(sub) for sub in cls.__subclasses__()))


def test_the_operations_doc_lists_exactly_the_codes_check_defines():
    assert _documented() == CHECK_EXIT_CODES


def test_the_help_epilog_lists_every_code(capsys):
    with pytest.raises(SystemExit) as done:
        main(["check", "--help"])
    assert done.value.code == 0
    listed = dict(re.findall(r"^  (\d+) +(.*)$", capsys.readouterr().out.split("exit codes:", 1)[1], re.M))
    assert {int(code): meaning for code, meaning in listed.items()} == CHECK_EXIT_CODES


def test_every_error_kind_and_bad_arguments_exit_with_a_listed_code(capsys):
    assert {kind.exit_code for kind in _error_kinds()} <= set(CHECK_EXIT_CODES)
    with pytest.raises(SystemExit) as usage:
        main(["check"])                                 # --tenant missing: argparse's own exit
    assert usage.value.code in CHECK_EXIT_CODES


def _check(consistent: bool) -> TenantCheck:
    return TenantCheck("t", 2, 2, 2, 2, 2 if consistent else 1, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("outcome, code", [
    (_check(True), 0), (_check(False), 8), (errors.Unavailable("no stack"), 6),
    (errors.FailedPrecondition("read-only"), 7), (errors.Unimplemented("qdrant"), 9), (KeyboardInterrupt(), 130),
])
def test_check_exits_with_the_documented_code(monkeypatch, capsys, outcome, code):
    async def fake_check(*args):
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(cli.status, "_check", fake_check)
    assert main(["check", "--tenant", "t", "--knowledge-store-target", "127.0.0.1:1"]) == code
    assert code in CHECK_EXIT_CODES
