"""launch/colab.ipynb: stored clean, and run end to end (train :tiny, curves, evaluate against the base) with
nbclient on this machine, where its install cell finds the checkout instead of cloning."""

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "launch", "colab.ipynb")

nbformat = pytest.importorskip("nbformat")


def _read():
    return nbformat.read(NOTEBOOK, as_version=4)


def _parameters(nb):
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    return cells[0]


def test_notebook_is_valid_and_stored_without_outputs():
    nb = _read()
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "no code cells"
    for c in code:
        assert c.outputs == [] and c.execution_count is None, f"outputs left in a cell:\n{c.source[:200]}"
    source = "\n".join(c.source for c in code)
    # the commands it runs are the README's (train :tiny, evaluate against the base) and a Qwen3 run (docs/scaling.md)
    assert "configs/rcrl.py:tiny" in source and '"evals.run"' in source and '"evals.curves"' in source
    assert "--config.model={qwen3_dir}" in source
    params = _parameters(nb).source
    for name in ("WORKDIR", "EVAL_DIR", "CURVES_DIR", "EVAL_PROMPTS", "EVAL_MAX_NEW_TOKENS", "QWEN3"):
        assert f"\n{name} = " in "\n" + params, f"{name} missing from the parameters cell"


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.smollm2
def test_notebook_runs_end_to_end(trained_workdir, tmp_path, monkeypatch):
    """Every cell, as a Colab user runs them. Its training cell is the README's first command, which the session
    has already run (conftest.trained_workdir): the notebook gets a copy of that finished run, so the cell finds
    its last step there and trains nothing a second time.

    Heavy tier (about 2 minutes on 2 cores: a Jupyter kernel and four SmolLM2 process starts, one of them a
    pairwise evaluation). The main suite checks the notebook's cells and commands
    (test_notebook_is_valid_and_stored_without_outputs) and runs each command on its own: the resume
    (test_main_job.py), evals.curves (test_evals_report.py) and the pairwise evaluation's command line
    (test_evals_run.py::test_pairwise_elo_command_line_on_a_tiny_model; on SmolLM2 in this tier)."""
    import shutil

    nbclient = pytest.importorskip("nbclient")
    shutil.copytree(trained_workdir.path, tmp_path / "run")
    nb = _read()
    # as papermill does: settings appended to the parameters cell override the defaults
    _parameters(nb).source += "\n" + "\n".join([
        f"WORKDIR = {str(tmp_path / 'run')!r}",
        f"CURVES_DIR = {str(tmp_path / 'curves')!r}",
        f"EVAL_DIR = {str(tmp_path / 'eval')!r}",
        "EVAL_PROMPTS = 2",
        "EVAL_MAX_NEW_TOKENS = 16",
    ])
    monkeypatch.setenv("RUBRIC_JAX_EVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.join(ROOT, "launch")}})
    client.execute()

    images, texts = 0, []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{out.get('ename')}: {out.get('evalue')}"
            if out.output_type == "display_data" and "image/png" in out.data:
                images += 1
            texts.append(out.get("text", ""))
    assert images == 3, f"expected the curves, ratings and win-rate plots inline, got {images} images"
    text = "".join(texts)
    assert "rubric_jax ready" in text and "skipped: set QWEN3" in text
    # the training cell ran the README's command on WORKDIR, which already holds the run's last step: the trainer
    # says so and trains nothing (rubric_jax.rl.trainer; a shorter copy would resume instead)
    assert "already holds step 2 >= total steps 2; nothing to do" in text
    # the run trained to the end and the evaluation rated both contestants
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints"))[-1] == "2"
    results = json.load(open(tmp_path / "eval" / "results.json"))
    assert {m["name"] for m in results["models"]} == {"base", "trained"}, results["models"]
