"""What the docs tell a user to type exists. Nothing documented is run: each command line is
handed to the program's own argument parser.

    command lines   every `nucleus …`, `python -m …` and `nucleus-*` line in the fenced code
                    blocks of README.md and docs/*.md, and every `$(PY) -m …` recipe of the
                    Makefile, is parsed in full:
                      nucleus …       by `cli.main.build_parser()`
                      python -m X …   X (or X.__main__) must exist and import; when X parses
                                      its arguments with argparse, X runs as `__main__` with
                                      `ArgumentParser.parse_args` stopping it right after the
                                      parse (or the refusal)
                      nucleus-*       a console script of pyproject.toml
    mentions        the same commands written inline in the prose (`nucleus migrate --recount`)
                    are often partial, so only their names are checked: the subcommands exist
                    (each of `put|get|list`), and so does every `--flag` they name.

So a renamed command, subcommand or flag, or a moved module, fails the suite. The number
checked is printed and may not drop below `FLOOR` / `MENTIONS_FLOOR` (raise them when the docs
show more; a drop means lines stopped being recognised, or were removed).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import io
import re
import runpy
import shlex
import sys
import tomllib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: Command lines recognised in code blocks and the Makefile, and inline mentions. May only go up.
FLOOR = 96
MENTIONS_FLOOR = 148
NOT_SHELL = {"json", "python", "py", "yaml", "yml", "toml", "proto", "js", "ts", "javascript", "dockerfile", "ini"}
WRAPPERS = {"nice": ("-n",), "sudo": ("-u",), "exec": (), "time": (), "env": (), "nohup": (),
            "timeout": ("-s", "-k")}      # wrapper: its options that take a value
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "{", "}"}
REDIRECT = re.compile(r"(?<=\s)\d?(?:>>|>&|&>|>|<)\s*(?:&?\d+|[^\s;&|)]+)")
SUBCOMMAND = re.compile(r"[a-z][a-z0-9_-]*")


@dataclass(frozen=True)
class Command:
    where: str                  # file:line
    program: str                # "nucleus", "python -m <module>" or a console script
    argv: tuple[str, ...]       # the words after the program
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"

    @property
    def module(self) -> str:
        return self.program.removeprefix("python -m ") if self.program.startswith("python -m ") else ""


# ---------------------------------------------------------------------------- finding them
def _strip_comment(line: str) -> str:
    """The line without its shell comment (a `#` starting a word, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _blocks(lines: list[str]) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of each fenced code block that may hold shell commands."""
    fence, info, start, body = "", "", 0, []
    for n, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not fence:
            m = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m:
                fence, info, start, body = m.group(1), m.group(2).lower(), n + 1, []
            continue
        if stripped.startswith(fence) and not stripped.strip(fence[0]):
            if info not in NOT_SHELL:
                yield start, body
            fence = ""
            continue
        body.append(raw)


def _prose(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, line) outside the fenced code blocks."""
    fence = ""
    for n, raw in enumerate(lines, 1):
        stripped = raw.strip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if not fence and m:
            fence = m.group(1)
        elif fence and stripped.startswith(fence) and not stripped.strip(fence[0]):
            fence = ""
        elif not fence:
            yield n, raw


def _logical_lines(start: int, body: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, text) of the shell lines of a block, continuation lines joined; in a block
    that shows prompts (`$ `), only the prompted lines (the rest is output)."""
    prompted = any(line.lstrip().startswith("$ ") for line in body)
    current, first = "", 0
    for i, raw in enumerate(body):
        line = raw.strip()
        if not current:
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            first = start + i
        line = _strip_comment(line).rstrip()
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            yield first, current
        current = ""
    if current.strip():
        yield first, current


def _segments(text: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ; && || | & and parentheses), without
    redirections."""
    lexer = shlex.shlex(REDIRECT.sub(" ", " " + text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:                     # unbalanced quotes: not a command line
        return []
    out, current = [], []
    for token in tokens:
        if token in SEPARATORS:
            out.append(current)
            current = []
        else:
            current.append(token)
    out.append(current)
    return [s for s in out if s]


def _command(where: str, words: list[str], text: str) -> Command | None:
    words = list(words)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):     # VAR=value prefixes
        words.pop(0)
    while words and words[0] in WRAPPERS:                 # nice -n 10 …, timeout -s KILL 60 …
        wrapper = words.pop(0)
        while words and words[0].startswith("-"):
            if words.pop(0) in WRAPPERS[wrapper] and words:
                words.pop(0)                              # the option's value
        if wrapper == "timeout" and words:
            words.pop(0)                                  # the duration
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    if program == "nucleus":
        return Command(where, "nucleus", tuple(words[1:]), text)
    if re.fullmatch(r"python(3(\.\d+)?)?", program) and len(words) >= 3 and words[1] == "-m":
        return Command(where, f"python -m {words[2]}", tuple(words[3:]), text)
    if re.fullmatch(r"nucleus-[a-z-]+", program):
        return Command(where, program, tuple(words[1:]), text)
    return None


def console_scripts() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def documented_commands() -> list[Command]:
    """Every command line of the docs' code blocks and the Makefile's recipes."""
    found: list[Command] = []
    for path in DOCS:
        rel = path.relative_to(ROOT)
        for start, body in _blocks(path.read_text().splitlines()):
            for n, line in _logical_lines(start, body):
                for words in _segments(line):
                    command = _command(f"{rel}:{n}", words, line.strip())
                    if command is not None:
                        found.append(command)
    for n, line in enumerate((ROOT / "Makefile").read_text().splitlines(), 1):
        if line.startswith("\t"):
            text = line.strip().replace("$(PY)", "python")
            for words in _segments(text):
                command = _command(f"Makefile:{n}", words, text)
                if command is not None:
                    found.append(command)
    return found


def documented_mentions() -> list[Command]:
    """Every inline code span of the prose that starts like a command (`nucleus …`, `python -m …`)."""
    found: list[Command] = []
    for path in DOCS:
        rel = path.relative_to(ROOT)
        for n, line in _prose(path.read_text().splitlines()):
            for span in re.findall(r"`([^`\n]+)`", line):
                if not re.match(r"([A-Z_]+=\S*\s+)*(\S*/)?(nucleus|python3?) ", span):
                    continue
                try:
                    words = shlex.split(span)
                except ValueError:
                    words = span.split()
                command = _command(f"{rel}:{n}", words, span)
                if command is not None:
                    found.append(command)
    return found


COMMANDS = documented_commands()
MENTIONS = documented_mentions()


# ---------------------------------------------------------------------------- the parsers
class _Stop(Exception):
    """Raised by the patched `parse_args`: the program stops there; nothing runs."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _quietly(parse: Callable[[], object]) -> str:
    """"" when `parse` parsed (or stopped at the parse), else what the parser said."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parse()
    except _Stop:
        return ""
    except SystemExit as stop:
        said = stderr.getvalue().strip().splitlines()        # usage, then the error
        return "" if stop.code in (0, None) else (said[-1] if said else f"exit {stop.code}")
    return ""


@contextlib.contextmanager
def _stopped_at_parse(module: str, argv: tuple[str, ...], parse: bool) -> Iterator[None]:
    """Within: `ArgumentParser.parse_args` parses (`parse`) or not, then raises `_Stop`."""
    original, saved_argv = argparse.ArgumentParser.parse_args, sys.argv

    def stop(self, args=None, namespace=None):
        if parse:
            original(self, args, namespace)
        raise _Stop(self)

    argparse.ArgumentParser.parse_args = stop
    sys.argv = [module, *argv]
    try:
        with warnings.catch_warnings():          # "found in sys.modules …": it was imported before
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv = saved_argv


def _runs_argparse(module: str) -> bool:
    """Whether `python -m module` parses its command line with argparse (its source, or the
    module its `main` comes from, calls `parse_args(`): only then is it run up to the parse."""
    spec = importlib.util.find_spec(module)
    runs = importlib.util.find_spec(module + ".__main__") if spec.submodule_search_locations else spec
    source = Path(runs.origin).read_text()
    if "parse_args(" in source:
        return True
    delegate = re.search(r"^from ([\w.]+) import main\b", source, re.M)
    target = importlib.util.find_spec(delegate.group(1)) if delegate else None
    return target is not None and "parse_args(" in Path(target.origin).read_text()


def _module_problem(module: str) -> str:
    """"" when `python -m module` can run: it exists and imports."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        return f"no module {module}"
    if spec.submodule_search_locations is not None:
        if importlib.util.find_spec(module + ".__main__") is None:
            return f"{module} is a package without __main__"
        module += ".__main__"
    importlib.import_module(module)
    return ""


def _parse_module_arguments(module: str, argv: tuple[str, ...]) -> str:
    """Run `module` as `__main__` with `argv`, stopped right after argparse parsed them."""
    with _stopped_at_parse(module, argv, parse=True):
        return _quietly(lambda: runpy.run_module(module, run_name="__main__", alter_sys=False))


@functools.cache
def _module_parser(module: str) -> argparse.ArgumentParser | None:
    """The parser `python -m module` builds (it runs up to its `parse_args`, which stops it)."""
    with _stopped_at_parse(module, (), parse=False):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=False)
        except _Stop as stop:
            return stop.parser
    return None


@functools.cache
def _nucleus_parser() -> argparse.ArgumentParser:
    from cli.main import build_parser

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def _unknown_names(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> list[str]:
    """The subcommands and `--flags` of a mention that `parser` does not know."""
    words = tuple(w.strip("[](),.;:") for w in words)
    path, known = [parser], set(parser._option_string_actions)
    problems: list[str] = []
    rest = list(words)
    while rest and _subcommands(path[-1]):
        subs = _subcommands(path[-1])
        while rest and rest[0].startswith("-"):            # options before the subcommand
            action = path[-1]._option_string_actions.get(rest.pop(0).split("=", 1)[0])
            if action is not None and action.nargs != 0 and rest and "=" not in rest[0]:
                rest.pop(0)                                # its value
        if not rest:
            break
        alternatives = rest[0].split("|")
        if not all(SUBCOMMAND.fullmatch(a) for a in alternatives):
            break                                  # a flag, a placeholder, a quoted argument
        problems += [f"no command {' '.join([*path[-1].prog.split()[1:], a])!r}"
                     for a in alternatives if a not in subs]
        if len(alternatives) > 1 or alternatives[0] not in subs:
            for a in alternatives:
                known |= set(subs[a]._option_string_actions) if a in subs else set()
            rest.pop(0)
            break
        path.append(subs[rest.pop(0)])
        known |= set(path[-1]._option_string_actions)
    for word in rest:
        for flag in word.split("|"):
            flag = flag.split("=", 1)[0]
            if re.fullmatch(r"--?[a-z][a-z0-9-]*", flag) and flag not in known:
                problems.append(f"no flag {flag} for {path[-1].prog!r}")
    return problems


# ---------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_a_documented_command_line_parses_with_the_programs_own_parser(command):
    if command.program in ("nucleus", "python -m cli.main"):
        problem = _quietly(lambda: _nucleus_parser().parse_args(list(command.argv)))
        assert not problem, f"{command}\n  nucleus says: {problem}"
    elif command.module:
        problem = _module_problem(command.module)
        assert not problem, f"{command}\n  {problem}"
        if _runs_argparse(command.module):
            problem = _parse_module_arguments(command.module, command.argv)
            assert not problem, f"{command}\n  python -m {command.module} says: {problem}"
    else:
        assert command.program in console_scripts(), f"{command}\n  {command.program} is not a console script"


@pytest.mark.parametrize("mention", MENTIONS, ids=lambda c: c.where)
def test_a_command_mentioned_in_the_prose_names_commands_and_flags_that_exist(mention):
    if mention.program in ("nucleus", "python -m cli.main"):
        problems = _unknown_names(_nucleus_parser(), mention.argv)
    elif mention.module:
        problem = _module_problem(mention.module)
        assert not problem, f"{mention}\n  {problem}"
        parser = _module_parser(mention.module) if _runs_argparse(mention.module) else None
        problems = _unknown_names(parser, mention.argv) if parser is not None else []
    else:
        problems = [] if mention.program in console_scripts() else [f"{mention.program} is not a console script"]
    assert not problems, f"{mention}\n  " + "; ".join(problems)


def test_the_docs_show_no_fewer_commands_than_before(capsys):
    with capsys.disabled():
        print(f"\ndocs promise: {len(COMMANDS)} command lines parsed ("
              f"{sum(c.program == 'nucleus' for c in COMMANDS)} nucleus, "
              f"{sum(bool(c.module) for c in COMMANDS)} python -m), "
              f"{len(MENTIONS)} inline mentions checked by name")
    assert len(COMMANDS) >= FLOOR, [str(c) for c in COMMANDS]
    assert len(MENTIONS) >= MENTIONS_FLOOR, [str(c) for c in MENTIONS]


# ---------------------------------------------------------------------------- the checker itself
def test_the_finder_reads_prompts_continuations_env_prefixes_wrappers_and_redirections():
    lines = list(_logical_lines(10, [
        "$ NUCLEUS_X=1 nice -n 10 .venv/bin/nucleus search \"a # b\" --tenant demo \\",
        "    --top-k 3   # a comment",
        "nucleus output line, not a command",
        "$ (cd x && \"$OLDPWD/.venv/bin/python\" -m cli.main up --detach) > out.txt 2>&1 &",
        "$ nucleus traces --list --last 20 > traces.txt",
    ]))
    commands = [_command(f"x:{n}", words, text) for n, text in lines for words in _segments(text)]
    assert [(c.where, c.program, c.argv) for c in commands if c is not None] == [
        ("x:10", "nucleus", ("search", "a # b", "--tenant", "demo", "--top-k", "3")),
        ("x:13", "python -m cli.main", ("up", "--detach")),
        ("x:14", "nucleus", ("traces", "--list", "--last", "20")),
    ]


def test_a_renamed_command_flag_or_module_is_caught():
    nucleus = _nucleus_parser()
    for argv in (("search", "q", "--tenant", "t", "--top-kk", "3"), ("serach", "q", "--tenant", "t")):
        assert _quietly(lambda: nucleus.parse_args(list(argv)))
    assert not _quietly(lambda: nucleus.parse_args(["search", "q", "--tenant", "t", "--top-k", "3"]))
    assert _unknown_names(nucleus, ("migrate", "--recount-all")) == ["no flag --recount-all for 'nucleus migrate'"]
    assert _unknown_names(nucleus, ("identity", "list|rotate|revoke|tokens")) == ["no command 'identity tokens'"]
    assert _unknown_names(nucleus, ("persona", "put|get|list", "[--tenant", "T]")) == []
    assert _parse_module_arguments("tests.support.fake_openai", ("--no-such-flag",))
    assert not _parse_module_arguments("tests.support.fake_openai", ("--script", "turns.json"))
    assert _unknown_names(_module_parser("tests.support.fake_openai"), ("--scrip",))
    assert _module_problem("benchmarks.no_such_module") == "no module benchmarks.no_such_module"
