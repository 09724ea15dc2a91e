"""The RARE family's experiment configs (RARE at sample and task level, MPO, RLER and their static and
instance-rubric baselines) each train two steps end to end."""

import numpy as np
import pytest

from rubric_jax.rl import trainer
from rubric_jax.rl.checkpoint import Checkpointer

from test_trainer import _tiny_run_config  # noqa: E402

# Fast compiles (the session's default, conftest._xla_optimisation): two steps of a tiny model do not repay XLA's
# optimisation, measured alone on 2 cores: 72 s for the file optimised, 64 s not.


RARE_CONFIGS = ("rare", "rare_task", "mpo", "rler", "sample_static", "task_static", "instance_rubric")


# heavy: RLER's two steps decode 512-token criteria with the real constrained writer and score them with the
# generating judge on the tiny model (about 80 s on 2 cores). CI keeps what it checks apart: the same config's
# trainer path, pools and resume in test_rler.py (scripted writer and scorer), the real writer and scorer in
# the [rare] case here.
PARAMS = [pytest.param(n, marks=pytest.mark.heavy) if n == "rler" else n for n in RARE_CONFIGS]


@pytest.mark.slow
@pytest.mark.parametrize("name", PARAMS)
def test_rare_and_baseline_configs_run_two_steps(name, tiny_qwen3, tmp_path):
    """The RARE family's :tiny variants on the bundled script requests, with the real judge and (for rare and
    rler) the real constrained writer on a tiny random model: two steps, statistics logged, checkpoint written.
    (Two steps are too few for a task-level revision: test_rare_task_revision.py runs one.)"""
    cfg = _tiny_run_config(name, tiny_qwen3[0], steps=2)
    hist = trainer.train(cfg, str(tmp_path))
    assert [m["step"] for m in hist] == [0, 1]
    for m in hist:
        assert np.isfinite(m["loss"]) and 0.0 <= m["reward/mean"] <= 1.0
        if name == "instance_rubric":
            assert 5 <= m["active_criteria"] <= 8 and "score/mean" in m
            continue
        assert 0.0 <= m["judge/invalid_fraction"] <= 1.0 and m["time/rewrite"] >= 0.0
        if name in ("task_static", "rare_task", "mpo"):  # the shared rubrics have six criteria
            assert m["active_criteria"] == 6
        if name == "rler":  # the initial 5-8 criteria, the pool (<= 5) and one written criterion a visit
            assert 5 <= m["active_criteria"] <= 8 + 5 + 1
            assert {"rler/added", "rler/pool_size", "rler/writer_failure_rate"} <= set(m)
            continue
        assert 0.0 <= m["rare/saturated_fraction"] <= 1.0
        if name == "rare":
            assert {"rare/trigger_rate", "rare/event_rate", "rare/writer_failures"} <= set(m)
        else:
            assert m["rare/event_rate"] == 0.0  # nothing is replaced at the sample level
    _, meta = Checkpointer(str(tmp_path)).restore()
    assert ("evidence" in meta) == (name in ("rare_task", "mpo")) and ("rler" in meta) == (name == "rler")
    assert ("rubrics" in meta) == (name != "instance_rubric")
