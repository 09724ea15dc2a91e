"""Evaluation suites: name -> run(args) (args: evals.run's parsed command line)."""

from __future__ import annotations


def get_suite(name: str):
    if name == "pairwise_elo":
        from evals.suites.pairwise_elo import run

        return run
    raise ValueError(f"--suite: unknown suite {name!r}; known: {sorted(SUITES)}")


SUITES = ("pairwise_elo",)
