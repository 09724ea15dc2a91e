"""Evaluation of trained policies: `python -m evals.run --suite=pairwise_elo --models=... --judge=... --out=DIR`.

Modules: models (model specs, loading, weight fingerprints), generate (cached batched generation), judges
(local and remote pairwise judges with a verdict cache), suites (pairwise_elo), bradley_terry and report
(ratings and their report).
"""
