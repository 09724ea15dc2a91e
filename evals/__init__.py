"""Evaluation of trained policies: `python -m evals.run --suite=pairwise_elo --models=... --judge=... --out=DIR`.

Modules: models (model specs, loading, weight fingerprints), generate (cached batched generation), judges
(local and remote pairwise judges with a verdict cache), suites (pairwise_elo), bradley_terry and report
(ratings and their report), ifeval (`python -m evals.ifeval`: IFEval accuracy, strict and loose),
verifier_study (`python -m evals.verifier_study`: the RLMR verifier's precision and recall per constraint
type) and fuzzy_items (its hand-labelled fuzzy-constraint set).
"""
