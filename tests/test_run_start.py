"""What happens before and around a step: the config is checked before any model loads, the paper's batch is
what the rcrl config trains on, the exploration projection is fixed for the run, a long step reports its
progress, and a broken checkpoint file is named."""

import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax import PRESETS, init_model, progress
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.methods.rcrl import reward
from rubric_jax.rl import setup as setup_mod, trainer, preflight
from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.losses import LossConfig, finalize
from rubric_jax.rl.policy import Policy, PolicyConfig, RolloutBatch, make_optimizer

from conftest import load_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))




def _set(c, field, value):
    *path, leaf = field.split(".")
    node = c
    for p in path:
        node = node[p]
    with node.unlocked() if hasattr(node, "unlocked") else _nullcontext():
        node[leaf] = value
    return c


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---------------------------------------------------------------------------------------------------------------
# Config validation: every value below fails before a model file is opened, naming its field.

BAD = [
    ("group_size", 0), ("group_size", 1), ("steps", 0), ("prompts_per_step", -1), ("max_completion_len", 0),
    ("dtype", "float8"), ("finetune", "qlora"), ("rubric_source", "prompt"),
    ("loss.aggregation", "token-mean"), ("loss.advantage", "ppo"), ("loss.kl_kind", "k2"),
    ("loss.micro_batch_size", 0), ("loss.dual_clip", 0.5), ("loss.eps_low", 1.5), ("loss.num_iterations", 0),
    ("sampling.temperature", 0.0), ("sampling.top_p", 0.0), ("sampling.top_k", -1), ("sampling.min_p", 1.0),
    ("optim.lr", 0.0), ("optim.schedule", "linear"), ("optim.warmup_steps", -5),
    ("forward.remat", "some"), ("forward.attention", "flash"),
    ("judge.mode", "soft"), ("judge.pairing", "random"), ("judge.comparison", "ranked"),
    ("judge.max_response_tokens", 0),
    ("reward.weighting", "linear"), ("reward.interval", 0), ("reward.method", "listwise"),
    ("lora.rank", 0), ("lora.dropout", 1.0), ("lora.targets", ["q_proj", "qkv"]),
    ("dynamic.oversample", 0), ("checkpoint.every", 0), ("mesh", "data=2"), ("mesh", "model:2"),
    ("data.path", "/no/such/prompts.jsonl"),
]


@pytest.mark.parametrize("field,value", BAD, ids=[f"{f}={v}" for f, v in BAD])
def test_a_bad_value_fails_before_the_model_loads_naming_its_field(field, value, monkeypatch, tmp_path):
    c = _set(load_config("rcrl", "tiny"), field, value)
    with pytest.raises(preflight.ConfigError, match=f"config.{field.split('.')[0]}"):
        preflight.check(c)

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the config was checked")

    monkeypatch.setattr(setup_mod, "load_model", no_load)
    with pytest.raises(preflight.ConfigError):
        trainer.train(c, str(tmp_path))


def test_full_finetuning_in_bfloat16_and_a_task_level_without_task_rubrics_are_refused():
    c = _set(_set(load_config("rcrl", "tiny"), "finetune", "full"), "dtype", "bfloat16")
    with pytest.raises(preflight.ConfigError, match="config.dtype=.*float32"):
        preflight.check(c)
    c = _set(load_config("rare_task", "tiny"), "rubric_source", "record")
    with pytest.raises(preflight.ConfigError, match="config.rubric_source"):
        preflight.check(c)
    c = _set(load_config("rlmr", "tiny"), "rlmr.gamma", 0.0)
    with pytest.raises(preflight.ConfigError, match="config.rlmr.*gamma"):
        preflight.check(c)
    # listwise judging gives win rates within a group: pointwise rewards have none, and labels stop at Z
    for name in ("absolute_rar", "rare", "rlmr"):
        with pytest.raises(preflight.ConfigError, match="config.judge.comparison='listwise'.*reward.method"):
            preflight.check(_set(load_config(name, "tiny"), "judge.comparison", "listwise"))
    preflight.check(_set(_set(load_config("rlmr", "tiny"), "judge.comparison", "listwise"), "rlmr.writing",
                         "pairwise"))
    with pytest.raises(preflight.ConfigError, match="group_size 27 is over 26"):
        preflight.check(_set(load_config("rcrl_listwise", "tiny"), "group_size", 27))


def test_the_renamed_fields_old_names_still_run_with_a_deprecation_warning(caplog):
    """reward.judging -> reward.method and judge.pairing='listwise' -> judge.comparison='listwise' (one release)."""
    old = _set(_set(load_config("rare", "tiny"), "reward.method", "pairwise"), "reward.judging", "rare")
    with caplog.at_level("WARNING"):
        sections = preflight.check(old)
    assert old.reward.method == "rare" and old.reward.judging is None and sections["reward"].method == "rare"
    assert "config.reward.judging is deprecated" in caplog.text and "reward.method='rare'" in caplog.text

    listwise = _set(load_config("rcrl", "tiny"), "judge.pairing", "listwise")
    caplog.clear()
    with caplog.at_level("WARNING"):
        sections = preflight.check(listwise)
    assert (listwise.judge.comparison, listwise.judge.pairing) == ("listwise", "all")
    assert sections["judge"].comparison == "listwise" and "judge.comparison='listwise'" in caplog.text
    # the new names give the same judge and reward sections as the old ones, and warn of nothing
    new = _set(load_config("rcrl", "tiny"), "judge.comparison", "listwise")
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert preflight.check(new)["judge"] == sections["judge"]
    assert "deprecated" not in caplog.text

    both = _set(_set(load_config("rcrl", "tiny"), "reward.method", "absolute"), "reward.judging", "rare")
    with pytest.raises(preflight.ConfigError, match="config.reward.judging='rare'.*reward.method.*'absolute'"):
        preflight.check(both)


@pytest.mark.parametrize("name", sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py"))))
def test_every_shipped_config_passes_the_check(name):
    preflight.check(load_config(name))
    preflight.check(load_config(name, "tiny"))


# ---------------------------------------------------------------------------------------------------------------
# The paper's batch (RcRL Table 6 as TRL counts it).

def test_rcrl_configs_step_on_tables_6_batch_of_completions_at_temperature_0_7():
    """Table 6: per-device batch 2 x accumulation 4 = 8 completions per optimizer step, 8 rollouts per prompt."""
    for name in ("rcrl", "absolute_rcrl", "pairwise_rar", "weighting", "rcrl_exploration", "health_rcrl"):
        c = load_config(name)
        completions = c.prompts_per_step * c.group_size
        assert (completions, c.group_size, c.loss.micro_batch_size) == (8, 8, 2), name
        assert completions // c.loss.micro_batch_size == 4, name  # gradient accumulation steps
        assert (c.sampling.temperature, c.sampling.top_p, c.sampling.top_k) == (0.7, 0.8, 20), name
    # the other methods keep their own papers' batches and temperatures
    assert (load_config("rare").prompts_per_step, load_config("rare").sampling.temperature) == (32, 1.0)
    assert load_config("rlmr").prompts_per_step == 8


def _tiny_policy(micro):
    model = init_model(PRESETS["tiny"].replace(vocab_size=64), seed=0)
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0))
    # B non-zero so the adapters carry a gradient into A as well
    opt = make_optimizer(1e-3, warmup_steps=0, total_steps=10, schedule="constant")
    c = load_config("rcrl")
    loss = LossConfig(aggregation=c.loss.aggregation, max_completion_len=12)
    return Policy(model, opt, loss, PolicyConfig(micro_batch_size=micro))


@pytest.mark.slow
def test_four_micro_batches_of_two_give_the_gradient_of_one_batch_of_eight_and_report_progress():
    """The rcrl step: 1 prompt x 8 rollouts, dr_grpo aggregation, 4 accumulated micro-batches of 2."""
    rng = np.random.default_rng(0)
    n, tp, tc = 8, 4, 12
    tokens = rng.integers(1, 64, (n, tp + tc)).astype(np.int32)
    lengths = rng.integers(3, tc + 1, n)
    cmask = np.arange(tc)[None, :] < lengths[:, None]
    mask = np.concatenate([np.ones((n, tp), bool), cmask], 1)
    adv = rng.normal(size=n).astype(np.float32)
    adv -= adv.mean()
    batch = RolloutBatch(tokens, mask, tp, cmask, adv)
    out, seen = [], []
    for micro in (8, 2):
        policy = _tiny_policy(micro)
        with progress.reporting(lambda phase, done, total, unit: seen.append((micro, phase, done, total))):
            g, sums, _ = policy.gradients(batch, jax.random.key(0))
        out.append(([np.asarray(x) / float(sums.den) for x in jax.tree.leaves(g)], float(finalize(sums)[0])))
    (a, la), (b, lb) = out
    scale = max(np.abs(x).max() for x in a)
    assert scale > 0
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-5 * scale)
    assert la == pytest.approx(lb, abs=1e-7)
    updates = [(d, t) for m, p, d, t in seen if m == 2 and p == "update"]
    assert updates[0] == (0, 4) and updates[-1][1] == 4 and [d for d, _ in updates] == sorted(d for d, _ in updates)


# ---------------------------------------------------------------------------------------------------------------
# Progress lines inside a step.

def test_step_printer_waits_for_the_interval_and_gives_an_eta():
    now = [0.0]
    lines = []
    p = progress.StepPrinter(3, interval=10, print_fn=lines.append, clock=lambda: now[0])
    p("judge", 0, 100, "verdicts")
    now[0] = 5.0
    p("judge", 10, 100, "verdicts")
    assert lines == []  # the step has not run 10 s yet
    now[0] = 20.0
    p("judge", 40, 100, "verdicts")
    assert lines == ["  step 3 | judge 40/100 verdicts | 0:20 in phase | ETA 0:30"]
    now[0] = 25.0
    p("judge", 50, 100, "verdicts")
    assert len(lines) == 1  # at most one line per interval
    # a phase that took a long time in the last step is announced when it starts, with that time as its ETA
    q = progress.StepPrinter(4, interval=10, print_fn=lines.append, clock=lambda: now[0], expected={"sample": 75.0})
    q("sample", 0, 1, "batches")
    assert lines[-1] == "  step 4 | sample: 1 batches to do | ETA 1:15 (as in the last step)"
    progress.report("judge", 1, 2)  # no sink installed: nothing happens, nothing fails
    assert not progress.active()


# ---------------------------------------------------------------------------------------------------------------
# The exploration bonus' projection: one matrix for the whole run, restored with the checkpoint.

@pytest.mark.slow
def test_exploration_projection_is_fixed_over_steps_and_resume(tiny_qwen3, tmp_path, monkeypatch):
    seen = []
    from rubric_jax.methods import terms

    real = terms.exploration_bonuses

    def spy(model, tokens_bt, mask_bt, prompt_len, group, cfg, proj):
        seen.append(np.asarray(proj))
        return real(model, tokens_bt, mask_bt, prompt_len, group, cfg, proj)

    monkeypatch.setattr(terms, "exploration_bonuses", spy)

    def cfg(steps, seed):
        c = load_config("rcrl_exploration", "tiny")
        c.model, c.steps, c.seed, c.max_completion_len, c.tensorboard = tiny_qwen3[0], steps, seed, 8, False
        c.prompt_width = "max"  # the sampler and update programs of the suite's other tiny runs (test_trainer)
        c.checkpoint.every = 2
        c.reward.interval = 100  # one criterion throughout: the judge compiles once (the curriculum is not at issue)
        return c

    # two steps (the matrix is the same at both), then one more after the resume: more steps would only repeat
    # the same checks
    wd = str(tmp_path / "run")
    trainer.train(cfg(2, seed=0), wd)
    # resumed with another seed: the checkpoint's projection seed wins, so step 2 uses step 0's matrix
    trainer.train(cfg(3, seed=1), wd)
    assert len(seen) == 3
    want = np.asarray(terms.exploration_projection(0, seen[0].shape[0], reward.RewardConfig(exploration_dim=64)))
    np.testing.assert_array_equal(seen[0], want)
    for p in seen[1:]:
        np.testing.assert_array_equal(p, seen[0])
    _, meta = Checkpointer(wd).restore()
    assert meta["exploration_seed"] == 0
    other = terms.exploration_projection(1, seen[0].shape[0], reward.RewardConfig(exploration_dim=64))
    assert not np.allclose(np.asarray(other), seen[0])  # the seed does choose the matrix


# ---------------------------------------------------------------------------------------------------------------
# Broken checkpoint files are named.

@pytest.mark.slow
def test_a_truncated_safetensors_or_gguf_file_is_named(tmp_path):
    from conftest import write_tiny_checkpoint
    from rubric_jax.models.loading import CheckpointFileError, embedded_model_path, load_model

    d = tmp_path / "ckpt"
    write_tiny_checkpoint(str(d))
    f = glob.glob(str(d / "*.safetensors"))[0]
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])
    with pytest.raises(CheckpointFileError, match=os.path.basename(f) + r".*truncated or corrupt"):
        load_model(str(d))
    g = tmp_path / "cut.gguf"
    whole = open(embedded_model_path("smollm2-135m-instruct"), "rb").read()
    g.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CheckpointFileError, match="cut.gguf"):
        load_model(str(g), dtype=jnp.float32)


# ---------------------------------------------------------------------------------------------------------------
# The config is checked once, where it enters, and frozen from there on.

def test_a_config_is_checked_once_where_it_enters_and_frozen(tiny_qwen3, tmp_path, monkeypatch):
    """main.run checks the config and hands the checked, frozen config to train and setup.build, which check
    nothing again; a plain ConfigDict given to build or train directly is checked there, once."""
    from test_trainer import _tiny_run_config

    from rubric_jax import main

    passes = []
    real = preflight._sections
    monkeypatch.setattr(preflight, "_sections", lambda c: passes.append(1) or real(c))
    cfg = _tiny_run_config("rcrl", tiny_qwen3[0])
    ready = preflight.check(cfg)
    assert len(passes) == 1 and preflight.check(ready) is ready and len(passes) == 1
    assert ready["reward"].method == "pairwise" and set(ready) == {"reward", "judge", "lora", "loss", "dynamic"}
    setup = setup_mod.build(ready)
    assert len(passes) == 1 and setup.config is ready.config
    with pytest.raises(AttributeError, match="immutable"):
        setup.config.steps = 5
    with pytest.raises(AttributeError, match="immutable"):
        setup.config.reward.interval = 5
    setup_mod.build(cfg)  # a plain ConfigDict is checked where it enters
    assert len(passes) == 2

    handed = []

    class Built(Exception):
        pass

    def fake_build(config):
        handed.append(config)
        raise Built

    monkeypatch.setattr(trainer, "build", fake_build)
    passes.clear()
    with pytest.raises(Built):
        main.run(_tiny_run_config("rcrl", tiny_qwen3[0]), str(tmp_path / "run"))
    assert len(passes) == 1 and isinstance(handed[0], preflight.Checked)
