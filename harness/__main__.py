"""``python -m harness`` is ``sampcheck``."""

import sys

from .cli import main

sys.exit(main())
