"""RcRL and its Table 3 baselines as a method package (registered as "rubric"): the config's rubric judged
pairwise or absolutely, the curriculum, criterion dropout, and the held-out pacing phase.

  method.py        the registered method: which criteria are active this step, the judge's rewards, its state
  pacing_phase.py  the held-out pacing phase: readings on held-out prompts decide when the next criterion enters
"""

from rubric_jax.methods.rcrl import method  # noqa: F401 (registers "rubric")
