"""``python -m benchmarks``: see ``benchmarks/cli.py`` and ``benchmarks/README.md``."""

import sys

from .cli import main

sys.exit(main())
