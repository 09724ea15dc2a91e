"""The built-in reward methods and reward terms, one module (or package) each.

  rcrl         RcRL and its Table 3 baselines: the config's rubric, pairwise or absolute, curriculum, dropout,
               held-out pacing; registered as "rubric" (the rcrl package: method.py, reward.py, pacing_phase.py)
  per_prompt   each prompt's own rubric (config.rubric_source = record | task) (per_prompt.py)
  rare         RARE at sample and task level, MPO, RLER and their static baselines (rare.py)
  rlmr         RLMR: writing reward, constraint verifier, group penalty or linear mix (rlmr.py)
  terms        the reward terms added on top of any method's reward: the bonuses (terms.py)

What a method and a term are, and the registries that find them by name, is rubric_jax.rl.plugins; the
trainer reaches this package only through those registries. This package is the entry point setup.py declares
for them, and importing it imports every module and subpackage in it: a new method is one module dropped here
(or in a package of your own that declares an entry point of the group "rubric_jax.plugins").
"""

import importlib
import pkgutil

# the names a method's or a term's module needs
from rubric_jax.rl.plugins import (BuildContext, Method, RewardBatch, RewardOut, Term, TermBatch,  # noqa: F401
                                   register, term)

for _module in pkgutil.iter_modules(__path__):  # sorted by name: registration order is the same every run
    importlib.import_module(f"{__name__}.{_module.name}")
