"""``python -m relay_aot.cli``: the ``relay-aot`` command line."""

import sys

from . import main

sys.exit(main())
