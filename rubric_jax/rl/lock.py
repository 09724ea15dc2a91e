"""One run per workdir: an exclusive lock taken before a run writes anything there.

Two runs on one workdir delete each other's in-flight checkpoints and interleave their metrics lines, so the
second is refused with one line naming the holder. The lock is `<workdir>/run.lock`, held with `flock` for the
life of the process (the kernel drops it when the process dies, however it dies) and holding JSON about the
holder: host, pid, start time and command, for the refusal's message. A lock file left by a process that is
gone (killed with SIGKILL, a crashed host) is stale: the next run takes it over, with a warning naming the
run that left it. Readers (`rubric_jax.serve`, `evals.run`) never take it: they only read a workdir.

On a filesystem without `flock` (some network mounts) the run goes on unlocked, with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time

from rubric_jax.errors import UserError

LOCK_NAME = "run.lock"

log = logging.getLogger(__name__)

__all__ = ["LOCK_NAME", "WorkdirLock", "WorkdirLockedError"]


class WorkdirLockedError(UserError):
    """Another live run holds the workdir."""


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {holder.get('started', '?')}"
            + (f" ({holder['command']})" if holder.get("command") else ""))


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        holder = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        holder = {"unreadable": raw[:200].decode("utf-8", "replace")}
    return holder if isinstance(holder, dict) else {}


class WorkdirLock:
    """`with WorkdirLock(workdir):` holds the workdir's lock for the block; `acquire` raises WorkdirLockedError
    (a UserError: one `error:` line at the command line) when a live run holds it."""

    def __init__(self, workdir: str):
        self.path = os.path.join(os.path.abspath(workdir), LOCK_NAME)
        self.fd: int | None = None

    def acquire(self) -> "WorkdirLock":
        me = {"host": socket.gethostname(), "pid": os.getpid(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv)}
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise UserError(f"cannot create the workdir's lock file {self.path}: {e.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    holder = _read(fd)
                    os.close(fd)
                    raise WorkdirLockedError(
                        f"{os.path.dirname(self.path)} is in use by another run ({_describe(holder)}): one run per "
                        f"workdir; stop that run or give this one another --workdir") from None
                os.close(fd)
                log.warning("cannot lock %s (%s): running without a lock, so nothing stops a second run on this "
                            "workdir", self.path, e.strerror)
                return self
            # The file may have been unlinked by a holder releasing it between our open and our lock: then we
            # hold a lock on a name nobody sees; start again on the current file.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            left = _read(fd)
            if left:
                log.warning("taking over the lock of %s left by a run that is no longer running (%s)", self.path,
                            _describe(left))
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode("utf-8"))
            os.fsync(fd)
            self.fd = fd
            return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it: the next run finds no file left behind
        except FileNotFoundError:
            pass
        os.close(self.fd)  # drops the flock
        self.fd = None

    def __enter__(self) -> "WorkdirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
