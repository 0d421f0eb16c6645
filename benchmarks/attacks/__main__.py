"""`python -m benchmarks.attacks`: the attack suite without the `nucleus` CLI."""
from __future__ import annotations

import sys

from benchmarks.attacks.cli import main

if __name__ == "__main__":
    sys.exit(main())
