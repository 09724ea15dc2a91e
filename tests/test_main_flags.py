"""A bad flag on the README's command is one `error:` line and exit status 2, like every other bad input,
before anything loads: absl alone printed a FATAL line and a usage hint, or for a misspelled config field a
55-line traceback."""

import os
import subprocess
import sys

import pytest

from rubric_jax import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "rcrl.py")
BASE = ["python -m rubric_jax.main", f"--config={CONFIG}:tiny", "--workdir=/tmp/w"]

CASES = [  # (the flag, what absl's parser raised, the one line)
    ("--config.stpes=4", AttributeError("'stpes'\nDid you mean \"steps\" instead of \"stpes\"?"),
     "--config.stpes: config has no field 'stpes'; did you mean 'steps'?"),
    ("--config.loss.eps_lwo=0.1", AttributeError("'eps_lwo'"),
     "--config.loss.eps_lwo: config.loss has no field 'eps_lwo'; did you mean 'eps_low'?"),
    ("--config.steps.x=1", KeyError("Attribute <class 'int'>.x does not exist"),
     "--config.steps.x: config.steps is not a section"),
    ("--confg.steps=3", main.flags.UnrecognizedFlagError("confg.steps"),
     "--confg.steps: no such flag; did you mean '--config.steps'?"),
    ("--wrokdir=/tmp/w", main.flags.UnrecognizedFlagError("wrokdir", suggestions=["workdir"]),
     "--wrokdir: no such flag; did you mean '--workdir'?"),
    ("--config.steps=abc", main.flags.IllegalFlagValueError("flag --config.steps=abc: invalid literal for int()"),
     "flag --config.steps=abc: invalid literal for int()"),
]


def test_each_bad_flag_gets_its_line():
    """_flag_error on the failures absl's parser raises: the nearest field or flag named, the config walked."""
    for flag, raised, line in CASES:
        assert main._flag_error(raised, ["main", *BASE[1:], flag]) == line, flag
    # the config given with a space, as absl also accepts
    assert main._flag_error(AttributeError("x"), ["main", "--config", CONFIG, "--config.stpes=4"]) == \
        CASES[0][2]


@pytest.mark.slow
def test_the_command_prints_only_that_line(tmp_path):
    """The real parser, in the README's command: one line on stderr, exit status 2, nothing written (one process
    start with the config file loaded, about 3 s)."""
    cmd = [sys.executable, "-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny", f"--workdir={tmp_path}/w",
           "--config.stpes=4"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr.splitlines(), p.stdout) == (2, ["error: " + CASES[0][2]], "")
    assert not os.path.exists(tmp_path / "w")
