"""Errors the user can fix, and how the command-line entry points report them.

A bad input (a malformed prompt file, a misspelled rubric, a setting out of range, an unwritable workdir, a
port in use) raises a `UserError` whose message names the file and line, the setting or the address at
fault. The entry points (`python -m rubric_jax.main`, `rubric_jax.serve`, `rubric_jax.sampling`) print that
message as one line on stderr and exit with status 2: a traceback would bury the one line that matters under
thirty that do not. Any other exception is a bug or a failure of the machine and keeps its traceback. Set
RUBRIC_JAX_TRACEBACK=1 to get the traceback of user errors too.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
from collections.abc import Iterable

TRACEBACK_ENV = "RUBRIC_JAX_TRACEBACK"
EXIT_USER_ERROR = 2  # argparse's status for a bad argument, so every bad input exits alike


class UserError(ValueError):
    """An input the user can fix; the message alone says what and where (no traceback needed)."""


# Older error classes that mean the same: a rubric, checkpoint file or prompt constraint the user gave is broken. Matched
# through sys.modules, so reporting never imports their modules (rubric_jax.models.loading pulls in JAX), and
# an exception of a module that was never imported cannot be one of them anyway.
_ALSO_USER_ERRORS = (
    ("rubric_jax.rubrics.types", "RubricError"),
    ("rubric_jax.models.loading", "CheckpointFileError"),
    ("rubric_jax.verifiers.ifeval", "ConstraintError"),
)


def is_user_error(exc: BaseException) -> bool:
    if isinstance(exc, UserError):
        return True
    for module, name in _ALSO_USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return True
    return False


def traceback_wanted() -> bool:
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def reported():
    """Turns a user error raised inside into `error: <message>` on stderr and SystemExit(2); other exceptions,
    and user errors under RUBRIC_JAX_TRACEBACK=1, propagate with their traceback."""
    try:
        yield
    except Exception as e:
        if not is_user_error(e) or traceback_wanted():
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USER_ERROR) from None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """"; did you mean 'x'?" for the closest of `choices` to a misspelled `word`, else ""."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_model_arg(flag: str, spec: str) -> None:
    """Raises UserError unless a model flag's value is an existing path (checkpoint directory, .gguf file or
    training workdir) or an embedded model's name: checked before anything loads."""
    if os.path.exists(spec):
        return
    from rubric_jax.models.loading import _ALIASES, EMBEDDED, is_embedded  # noqa: PLC0415 (loads JAX)

    if is_embedded(spec):
        return
    names = sorted(EMBEDDED) + sorted(_ALIASES)
    raise UserError(f"{flag}={spec!r}: no such checkpoint, .gguf file or directory, and not an embedded model "
                    f"name {tuple(names)}" + did_you_mean(spec, names))
