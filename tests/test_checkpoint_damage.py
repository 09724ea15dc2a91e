"""Damaged checkpoints and mismatched resumes, on copies of the session's trained run (conftest.trained_workdir:
checkpoints 1 and 2 of the README's first command).

Each part of checkpoint 2 is damaged in turn (array data, array metadata, the data-iterator state, the store's
manifest, the step metadata cut short; the commit marker removed): the resume's reader sets the folder aside
(renamed, every file kept), says so in one warning line, and restores exactly what checkpoint 1 holds, read
here straight from its files. A resume that changes the LoRA rank or targets, the prompt file, or asks for no
more steps than the workdir holds is named before the model loads. None of these trains: the command-line resume
past a damaged checkpoint is tests/test_main_job.py's, which damages its copy before it resumes.
"""

import json
import logging
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import load_config
from rubric_jax.rl.checkpoint import Checkpointer, DamagedCheckpointError
from rubric_jax.rl.workdir import ResumeError, check_prompts, check_resume, latest_lora, latest_trained, run_record

# every test reads a copy of the session's trained run, the README command (about 70 s on 2 cores): the quick
# tier (-m "not slow") would wait for it
pytestmark = pytest.mark.slow


def _truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def _largest(folder):
    return max((os.path.join(folder, f) for f in os.listdir(folder)), key=os.path.getsize)


DAMAGE = {  # what a full disk or an interrupted copy leaves of checkpoint 2 (paths relative to its folder)
    "array data cut short": lambda c: _truncate(_largest(os.path.join(c, "state", "ocdbt.process_0", "d"))),
    "array metadata cut short": lambda c: _truncate(os.path.join(c, "state", "_METADATA")),
    "data-iterator state cut short": lambda c: _truncate(os.path.join(c, "meta", "metadata")),
    "array store manifest cut short": lambda c: _truncate(os.path.join(c, "state", "manifest.ocdbt")),
    "step metadata cut short": lambda c: _truncate(os.path.join(c, "_CHECKPOINT_METADATA")),
    "commit marker removed": lambda c: os.remove(os.path.join(c, "commit_success.txt")),
}
# The reason the warning line gives for each: the failing exception's class, or what is missing.
REASON = {"array data cut short": "ValueError: OUT_OF_RANGE", "array metadata cut short": "JSONDecodeError",
          "data-iterator state cut short": "JSONDecodeError", "array store manifest cut short": "ValueError: DATA_LOSS",
          "step metadata cut short": "JSONDecodeError", "commit marker removed": "uncommitted"}


@pytest.fixture
def run_copy(trained_workdir, tmp_path):
    wd = str(tmp_path / "run")
    shutil.copytree(trained_workdir.path, wd)
    return wd


def _files(folder):
    return sorted((os.path.relpath(os.path.join(d, f), folder), os.path.getsize(os.path.join(d, f)))
                  for d, _, fs in os.walk(folder) for f in fs)


def _read_directly(workdir, step):
    """Checkpoint `step`'s state and meta straight from its files: orbax's plain reader on state/, json on meta/."""
    folder = os.path.join(workdir, "checkpoints", str(step))
    with ocp.StandardCheckpointer() as reader:
        state = reader.restore(os.path.join(folder, "state"))
    with open(os.path.join(folder, "meta", "metadata")) as f:
        return state, json.load(f)


def _unwrapped(tree):
    """The {"value": array} wrappers of nnx variables removed, as the workdir reader returns adapters."""
    if isinstance(tree, dict):
        return _unwrapped(tree["value"]) if set(tree) == {"value"} else {k: _unwrapped(v) for k, v in tree.items()}
    return tree


def _assert_same_tree(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "rubric_jax.rl.checkpoint" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_set_aside_and_the_earlier_one_restored(run_copy, damage, caplog):
    caplog.set_level(logging.WARNING)
    want_state, want_meta = _read_directly(run_copy, 1)
    ckdir = os.path.join(run_copy, "checkpoints")
    DAMAGE[damage](os.path.join(ckdir, "2"))
    damaged_files = _files(os.path.join(ckdir, "2"))

    # The trainer's sequence: latest_step, then restore into a target of the run's structure and shapes.
    ck = Checkpointer(run_copy, max_to_keep=3)
    step = ck.latest_step()
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), want_state)
    state, meta = ck.restore(step, target_state=target)
    ck.close()
    assert step == 1
    _assert_same_tree(state, want_state)  # LoRA adapters and the whole optimizer state (moments, count)
    assert meta == want_meta and meta["step"] == 1 and meta["data"]["grain"] == {"next_index": 1}

    [line] = _warnings(caplog)
    assert "\n" not in line and "checkpoint step 2 skipped" in line and REASON[damage] in line, line
    assert f"set aside as {os.path.join(ckdir, '2.damaged-1')}; using step 1" in line, line
    assert sorted(os.listdir(ckdir)) == ["1", "2.damaged-1"]
    assert _files(os.path.join(ckdir, "2.damaged-1")) == damaged_files  # renamed, every file as it was
    caplog.clear()
    again = Checkpointer(run_copy)
    assert again.all_steps() == [1] and again.latest_step() == 1  # not listed again, nothing more to say
    again.close()
    assert not _warnings(caplog)


def test_serve_and_evals_read_the_newest_intact_checkpoint(run_copy, caplog):
    """`latest_trained` is the workdir reader of `serve` (load_trained) and `evals` (its workdir contestants)."""
    caplog.set_level(logging.WARNING)
    want, _ = _read_directly(run_copy, 1)
    DAMAGE["array data cut short"](os.path.join(run_copy, "checkpoints", "2"))
    mode, lora, step = latest_trained(run_copy)
    assert (mode, step) == ("lora", 1)
    _assert_same_tree(lora, _unwrapped(want["lora"]))
    [line] = _warnings(caplog)
    assert "checkpoint step 2 skipped" in line and "using step 1" in line
    assert sorted(os.listdir(os.path.join(run_copy, "checkpoints"))) == ["1", "2.damaged-1"]


def test_damage_the_file_check_misses_is_caught_by_the_read(run_copy, caplog, monkeypatch):
    """Bytes garbled in place pass `problem` (it reads no array): the read's own failure sets the step aside."""
    caplog.set_level(logging.WARNING)
    want, _ = _read_directly(run_copy, 1)
    DAMAGE["array data cut short"](os.path.join(run_copy, "checkpoints", "2"))
    monkeypatch.setattr(Checkpointer, "problem", lambda self, step: None)
    ck = Checkpointer(run_copy, max_to_keep=None)
    step, state, _ = ck.restore_newest()
    assert step == 1
    _assert_same_tree(state, want)
    [line] = _warnings(caplog)
    assert "checkpoint step 2 skipped" in line and "OUT_OF_RANGE" in line and "TensorStore(" not in line, line
    assert sorted(os.listdir(ck.directory)) == ["1", "2.damaged-1"]
    ck.close()


def test_a_failure_that_is_not_damage_sets_nothing_aside(run_copy, monkeypatch, caplog):
    """A restore target of other shapes, or a check that cannot run (here: TensorStore refusing the read), says
    nothing against the files: the checkpoint stays where it is."""
    wrong = jax.tree.map(lambda x: jax.ShapeDtypeStruct((1,), np.float32), _read_directly(run_copy, 2)[0])
    ck = Checkpointer(run_copy, max_to_keep=None)
    with pytest.raises(ValueError, match="shape mismatch"):
        ck.restore(2, target_state=wrong)
    ck.close()

    def refuse(state_dir):
        raise TypeError("read() got an unexpected keyword argument 'byte_range'")

    monkeypatch.setattr("rubric_jax.rl.checkpoint._ocdbt_problem", refuse)
    caplog.set_level(logging.WARNING)
    assert Checkpointer(run_copy, max_to_keep=None).latest_step() == 2
    assert "checkpoint step 2 could not be checked (TypeError" in _warnings(caplog)[0]
    assert sorted(os.listdir(os.path.join(run_copy, "checkpoints"))) == ["1", "2"]


def test_no_intact_checkpoint_names_the_folder_and_the_ways_out(run_copy, caplog):
    caplog.set_level(logging.WARNING)
    ckdir = os.path.join(run_copy, "checkpoints")
    for step in ("1", "2"):
        DAMAGE["data-iterator state cut short"](os.path.join(ckdir, step))
    for attempt in range(2):  # the set-aside folders keep a later run from starting afresh over them
        with pytest.raises(DamagedCheckpointError) as e:
            Checkpointer(run_copy, max_to_keep=None).latest_step()
        msg = str(e.value)
        assert f"no intact checkpoint in {ckdir}" in msg and "1.damaged-1, 2.damaged-1" in msg, msg
        assert "another workdir" in msg and "delete the set-aside folders" in msg and "restore one" in msg, msg
    assert len(_warnings(caplog)) == 2  # one line per step, the first time only
    assert sorted(os.listdir(ckdir)) == ["1.damaged-1", "2.damaged-1"]
    with pytest.raises(FileNotFoundError, match="no intact checkpoint"):  # evals reports FileNotFoundErrors
        latest_lora(run_copy)


def _set_meta(workdir, step, update):
    path = os.path.join(workdir, "checkpoints", str(step), "meta", "metadata")
    with open(path) as f:
        meta = json.load(f)
    update(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


@pytest.mark.parametrize("recorded", ["meta", "config.json"])
def test_a_changed_lora_rank_or_targets_is_named_before_the_model_loads(run_copy, recorded):
    """Checkpoints record their run's settings (meta["run"]); older ones are compared with config.json."""
    config = load_config("rcrl", "tiny")
    if recorded == "meta":  # the record wins over config.json: make them differ to see which is read
        _set_meta(run_copy, 2, lambda m: m.update(run={**run_record(config), "lora": {"rank": 16,
                                                                                   "targets": ["q_proj"]}}))
        was_rank, was_targets = 16, "[q_proj]"
    else:
        _set_meta(run_copy, 2, lambda m: m.pop("run", None))
        was_rank, was_targets = 4, "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"
        assert check_resume(config, run_copy) == 2  # the same settings resume
    config.lora.rank = 8
    with pytest.raises(ResumeError) as e:
        check_resume(config, run_copy)
    assert f"{run_copy}: checkpoint 2 was trained with lora.rank={was_rank}" in str(e.value)
    assert "this run has lora.rank=8" in str(e.value)
    config.lora.rank = was_rank
    config.lora.targets = ["q_proj", "v_proj"]
    with pytest.raises(ResumeError) as e:
        check_resume(config, run_copy)
    assert f"lora.targets={was_targets} and this run has lora.targets=[q_proj, v_proj]" in str(e.value)


@pytest.mark.parametrize("recorded", [True, False])
def test_a_changed_prompt_file_names_both_files(run_copy, tmp_path, recorded):
    from rubric_jax.data import PromptDataset, load_jsonl

    config = load_config("rcrl", "tiny")
    _, meta = _read_directly(run_copy, 2)
    if recorded:
        meta["run"] = run_record(config)
    else:
        meta.pop("run", None)
    same = PromptDataset(load_jsonl("creative_writing"), config.prompts_per_step, seed=config.data.seed)
    check_prompts(run_copy, 2, meta, same.iterator().get_state(), config)  # the same prompts resume
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"id": f"o{i}", "prompt": f"Write about {i}."}) + "\n" for i in range(3)))
    config.data.path = str(other)
    new = PromptDataset(load_jsonl(str(other)), config.prompts_per_step, seed=config.data.seed)
    with pytest.raises(ResumeError) as e:
        check_prompts(run_copy, 2, meta, new.iterator().get_state(), config)
    assert (f"checkpoint 2 was trained on the prompts of 'creative_writing' (200 records) and this run reads "
            f"{str(other)!r} (3 records)") in str(e.value)
    assert "--config.data.path=creative_writing" in str(e.value)


def test_no_more_steps_than_done_says_so_before_the_model_loads(run_copy, capsys):
    from rubric_jax.rl.trainer import train

    metrics = open(os.path.join(run_copy, "metrics.jsonl")).read()
    for steps in (1, 2):
        config = load_config("rcrl", "tiny")
        config.steps = steps
        assert train(config, run_copy) == []
        assert capsys.readouterr().out == (f"workdir {run_copy} already holds step 2 >= total steps {steps}; "
                                           f"nothing to do\n")
    config.lora.rank = 8  # and a mismatch is named before anything loads, whatever the steps
    with pytest.raises(ResumeError, match="lora.rank=4 and this run has lora.rank=8"):
        train(config, run_copy)
    assert open(os.path.join(run_copy, "metrics.jsonl")).read() == metrics
    assert sorted(os.listdir(os.path.join(run_copy, "checkpoints"))) == ["1", "2"]
