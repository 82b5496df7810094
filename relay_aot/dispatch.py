"""Type-directed dispatch for the visitors (one method per node type, no isinstance chains)."""

from __future__ import annotations

from collections.abc import Callable, Mapping


def method_for(table: Mapping[type, Callable], node: object) -> Callable | None:
    """The handler registered for ``node``'s class, or for its nearest registered base class."""
    for cls in type(node).__mro__:
        handler = table.get(cls)
        if handler is not None:
            return handler
    return None


def dispatch(table: Mapping[type, Callable], node: object, *args, what: str = "node"):
    """Call the handler of ``node`` with ``(node, *args)``; TypeError if there is none."""
    handler = method_for(table, node)
    if handler is None:
        raise TypeError(f"no handler for {what} {type(node).__name__}")
    return handler(node, *args)
