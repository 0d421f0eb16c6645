"""Every product file stays readable: at most MAX_LINES lines, no line over MAX_LINE_CHARS
characters. Generated protobuf modules (nucleus/v1/*_pb2*.py) are not product code."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The product packages checked (cli and the shipped benchmarks join after their move).
PRODUCT_ROOTS = ("services", "shared", "ranking", "cli", "benchmarks")
MAX_LINES = 600
MAX_LINE_CHARS = 120


def _product_files() -> list[Path]:
    files = []
    for root in PRODUCT_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            if path.parent.name == "v1" and path.parent.parent.name == "nucleus" and "_pb2" in path.name:
                continue
            files.append(path)
    return files


def test_the_product_roots_hold_python_files():
    assert _product_files()


def test_no_product_file_is_over_the_line_limit():
    long_files = []
    for path in _product_files():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long_files.append(f"{path.relative_to(REPO)}: {n} lines")
    assert not long_files, f"files over {MAX_LINES} lines:\n" + "\n".join(long_files)


def test_no_product_line_is_over_the_width_limit():
    long_lines = []
    for path in _product_files():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if len(line) > MAX_LINE_CHARS:
                long_lines.append(f"{path.relative_to(REPO)}:{i}: {len(line)} characters")
    assert not long_lines, f"lines over {MAX_LINE_CHARS} characters:\n" + "\n".join(long_lines)
