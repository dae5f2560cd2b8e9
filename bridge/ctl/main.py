"""The ``txbridge`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    del argv
    return 0


if __name__ == "__main__":
    sys.exit(main())
