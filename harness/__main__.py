"""``python -m harness`` is ``sampcheck``."""

import sys

from harness.cli import main

if __name__ == "__main__":  # a spawned worker re-imports this module
    sys.exit(main())
