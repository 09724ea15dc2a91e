"""Failed checkpoint saves, said once: the error the trainer stops with, and the quieting of what orbax and
TensorStore print besides it (rubric_jax.rl.checkpoint uses these; a full disk once printed ~460 lines).

A save that fails (a full disk, a quota, a folder made read-only) reaches the caller as one `SaveFailedError`
carrying the operating system's own error. Everything else a failed save produces is noise by then: orbax's
per-thread ERROR records, asyncio's "Task exception was never retrieved" for orbax's write tasks, and
"Event loop is closed" reports from the TensorStore writes orbax abandoned. `quiet_failed_saves` installs the
filters for all three, once per process, when a writing Checkpointer opens.
"""

from __future__ import annotations

import logging
import os
import re

from rubric_jax.errors import UserError
from rubric_jax.rl.unraisable import intercept

__all__ = ["SaveFailedError", "cause_chain", "os_error", "quiet_failed_saves", "short"]


class SaveFailedError(UserError):
    """Writing checkpoint `step` failed (a full disk, a quota, a folder made read-only); `why` is the OS's own
    error. Raised by `save`, `check` or `wait`, whichever first sees the background write's failure: the trainer
    stops there with one line instead of training on with nothing saved."""

    def __init__(self, step: int, why: str, directory: str, message: str | None = None):
        super().__init__(message or f"saving checkpoint {step} failed ({why})")
        self.step, self.why, self.directory = step, why, directory


class _OrbaxSaveErrors(logging.Filter):
    """Drops orbax's ERROR records (a traceback per failed background thread, hundreds of lines for one full
    disk): every failed save reaches the caller as a SaveFailedError, which says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        if record.name == "asyncio":  # orbax's write tasks whose failure it reported through its own future
            msg = record.getMessage()
            return not ("exception was never retrieved" in msg and f"{os.sep}orbax{os.sep}" in msg)
        return f"{os.sep}orbax{os.sep}" not in record.pathname


_ORBAX_FILTER = _OrbaxSaveErrors()


def _is_closed_loop_callback(exc_type, exc, tb) -> bool:
    """RuntimeError('Event loop is closed') raised in asyncio's call_soon_threadsafe: a TensorStore write that
    orbax abandoned when its save failed completes later, on TensorStore's thread, and its done-callback finds
    orbax's event loop gone. Nothing is lost that the SaveFailedError has not already said."""
    if not (exc_type is RuntimeError and "Event loop is closed" in str(exc)):
        return False
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}asyncio{os.sep}" in tb.tb_frame.f_code.co_filename


def _silence_abandoned_writes() -> None:
    """Drops the unraisable-exception reports of `_is_closed_loop_callback`: after a failed save they come by the
    dozen (up to ~200 lines), printed at any moment before or after the one-line error, since the failure happens
    in the background before `check` sees it. Installed when a writing Checkpointer opens (`unraisable`: once per
    process, never removed, since the late callbacks can come during interpreter exit)."""
    intercept("abandoned_checkpoint_writes",
              lambda u: _is_closed_loop_callback(u.exc_type, u.exc_value, u.exc_traceback))


def cause_chain(e: BaseException):
    seen = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def short(e: BaseException, strip: str = "") -> str:
    """`Class: first line` of the innermost exception of `e`'s chain (TensorStore's own error, not orbax's
    wrapper that prints the whole store spec), paths under `strip` made relative, at most 240 characters."""
    inner = cause_chain(e)[-1]
    msg = (str(inner).strip().splitlines() or [""])[0]
    if strip:
        msg = msg.replace(strip.rstrip(os.sep) + os.sep, "")
    if len(msg) > 240:
        msg = msg[:237] + "..."
    return f"{type(inner).__name__}: {msg}"


# TensorStore ends an OS failure with "...: <strerror> [os_error_code='N']" whatever operation failed; the text
# between the last colon and that tag is the OS's own words (a "Failed to write N bytes ..." prefix is not always
# there: CI once got a save error this pattern's earlier, write-only form missed).
_TS_OS_ERROR = re.compile(r":\s*([^:\[\]]+?)\s*\[os_error_code='?(\d+)'?\]")


def os_error(e: BaseException, strip: str = "") -> str:
    """The operating system's own error in `e`'s chain, `[Errno 28] No space left on device`, whether Python
    raised it or TensorStore wrapped it in a ValueError; else `short(e)`."""
    for x in cause_chain(e):
        if isinstance(x, OSError) and x.errno:
            return f"[Errno {x.errno}] {x.strerror}"
        m = _TS_OS_ERROR.search(str(x))
        if m:
            return f"[Errno {m.group(2)}] {m.group(1).strip()}"
    return short(e, strip)


def quiet_failed_saves() -> None:
    """Installs the filters of this module (idempotent: logging keeps one copy of a filter, the hook checks)."""
    logging.getLogger("absl").addFilter(_ORBAX_FILTER)  # orbax logs through absl.logging
    logging.getLogger("asyncio").addFilter(_ORBAX_FILTER)
    _silence_abandoned_writes()
