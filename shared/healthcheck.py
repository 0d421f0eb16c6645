"""Container health probe: exit 0 only if the gRPC service reports SERVING.

    python -m shared.healthcheck --target 127.0.0.1:50061 --service nucleus.v1.KnowledgeStore
"""
from __future__ import annotations

import argparse
import sys

from deploy.supervisor import health_ok


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.healthcheck")
    parser.add_argument("--target", required=True)
    parser.add_argument("--service", default="")
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    return 0 if health_ok(args.target, args.service, args.timeout) else 1


if __name__ == "__main__":
    sys.exit(main())
