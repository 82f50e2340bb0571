"""``python -m kraft.cli``: the same as the ``kraft`` console script."""

from __future__ import annotations

import sys

from kraft.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
