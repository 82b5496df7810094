"""The control IR: node definitions (``nodes.py``) and the analyses on them.

``liveness.py`` (last uses, for moves), ``escapes.py`` (which constants may reach a caller),
``in_place.py`` (concatenations whose pieces are written in place) and
``printer.py`` (the IR as text: ``relay-aot show --ir``) read the IR; ``relay_aot.lower``
produces it and the backends print it.
"""

from .nodes import *  # noqa: F401,F403 - the IR's vocabulary, used as ir.Let, ir.Var, ...
