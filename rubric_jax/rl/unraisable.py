"""One process-wide `sys.unraisablehook` for the exceptions Python reports instead of raising.

An exception raised where Python cannot propagate it (a garbage-collector callback, `__del__`, a weakref or
done-callback on another thread) is printed as "Exception ignored in ..." with a traceback and dropped. Two
parts of a run need some of those reports: the stop signals (`rubric_jax.rl.stopping`: a SIGTERM that lands in
JAX's gc callback must still stop the step) and failed checkpoint saves (`rubric_jax.rl.checkpoint_errors`:
the abandoned TensorStore writes' callbacks, by the dozen, after the one-line error). Each registers a named
handler here; one hook, installed once per process and never removed (late reports come during interpreter
exit too), offers each report to the handlers and passes what none takes to the hook that was there before.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

__all__ = ["intercept"]

_HANDLERS: dict[str, Callable[[Any], bool]] = {}


def intercept(name: str, handles: Callable[[Any], bool]) -> None:
    """Registers (or replaces) handler `name`: `handles(report)` returns True when it has dealt with the
    unraisable report (a `sys.UnraisableHookArgs`), so nothing is printed. Installs the hook on first use, and
    again only when something else has replaced it since (that hook then sits below ours)."""
    _HANDLERS[name] = handles
    prev = sys.unraisablehook
    if getattr(prev, "_rubric_jax", False):
        return

    def hook(report):
        for handler in list(_HANDLERS.values()):
            if handler(report):
                return
        prev(report)

    hook._rubric_jax = True
    sys.unraisablehook = hook
