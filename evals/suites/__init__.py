"""Evaluation suites: name -> module with `run(args, tools)` and optionally `add_args(parser)` for the suite's own
flags. args: evals.run's parsed command line; tools: the evals.tools.SuiteTools evals.run builds for the run
(contestants, cached generation, judges and scorers, the output writer). A suite keeps only its own logic:
its data, its statistics, its report. `run(args)` alone builds the tools from args."""

from __future__ import annotations

import importlib

SUITES = {
    "pairwise_elo": "evals.suites.pairwise_elo",  # every pair of models, both orders, Bradley-Terry ratings
    "rubric_score": "evals.suites.rubric_score",  # Creative Writing v3-style criteria scores and pairwise margins
    "elements": "evals.suites.elements",  # stories that must weave in drawn elements, craft + integration grades
    "health": "evals.suites.health",  # HealthBench-style per-example rubric items, met / not met
    "fixed_rubric": "evals.suites.fixed_rubric",  # RARE's fixed script metrics + blind pairwise validation
    "gv_gap": "evals.suites.gv_gap",  # the generation-verification gap (RcRL section 3)
    "diagnostics": "evals.suites.diagnostics",  # distinct-n, repetition, length, entropy, foreign script
}


def get_module(name: str):
    if name not in SUITES:
        raise ValueError(f"--suite: unknown suite {name!r}; known: {sorted(SUITES)}")
    return importlib.import_module(SUITES[name])


def get_suite(name: str):
    return get_module(name).run
