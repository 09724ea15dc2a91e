"""evals.report (results.json, report.md, PNGs) and evals.curves (training-curve PNGs from metrics.jsonl)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from PIL import Image  # noqa: E402  (matplotlib depends on pillow)

from evals import bradley_terry as bt  # noqa: E402
from evals import curves, report  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _assert_png(path, min_side=150):
    assert os.path.isfile(path), path
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert min(im.size) >= min_side, im.size
        px = np.asarray(im.convert("L"))
    assert px.std() > 1.0  # something was drawn


def _small_result(reps=20):
    rng = np.random.default_rng(0)
    theta = np.array([0.0, 0.6, -0.3])
    K = 300
    a = rng.integers(0, 3, K)
    b = (a + rng.integers(1, 3, K)) % 3
    p = 1 / (1 + np.exp(-(theta[a] - theta[b])))
    comps = {"a": a, "b": b, "p_a": (rng.random(K) < p).astype(float), "prompt": np.arange(K) // 3,
             "len_a": rng.integers(50, 300, K), "len_b": rng.integers(50, 300, K),
             "judge": np.where(np.arange(K) % 2 == 0, "gpt|judge", "qwen-judge")}
    return bt.rate(comps, ["base model", "grpo|lora", "sft-v2"], bootstrap_reps=reps, seed=0)


def test_write_report(tmp_path):
    res = _small_result()
    paths = report.write_report(res, str(tmp_path / "out"), title="Tiny eval")
    assert set(paths) == {"results.json", "report.md", "ratings.png", "win_rates.png"}
    for name in ("ratings.png", "win_rates.png"):
        _assert_png(paths[name])
    with open(paths["results.json"]) as f:
        loaded = json.load(f, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert loaded["title"] == "Tiny eval"
    assert [m["name"] for m in loaded["models"]] == [m["name"] for m in res["models"]]
    md = open(paths["report.md"], encoding="utf-8").read()
    assert md.startswith("# Tiny eval")
    for name in ("base model", "grpo\\|lora", "sft-v2"):
        assert name in md
    for section in ("## Ratings", "## Win rates", "## Settings", "LC ELO"):
        assert section in md
    best = res["models"][0]
    assert f"{best['elo']:.0f}" in md and f"[{best['lo']:.0f}, {best['hi']:.0f}]" in md
    assert "ratings.png" in md and "win_rates.png" in md
    wr = res["win_rate"]
    w, lo, hi = wr["matrix"][1][0], wr["lo"][1][0], wr["hi"][1][0]
    assert f"| {100 * w:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] |" in md


def test_write_report_without_intervals_or_comparisons(tmp_path):
    res = _small_result(reps=0)
    res["win_rate"]["matrix"][0][1] = None  # a pair never compared
    paths = report.write_report(res, str(tmp_path), title="No bootstrap")
    _assert_png(paths["ratings.png"])
    _assert_png(paths["win_rates.png"])
    md = open(paths["report.md"], encoding="utf-8").read()
    assert "–" in md  # missing intervals / cells shown as dashes
    assert "prompt-bootstrap interval." not in md and " [" not in md.split("## Win rates")[1].split("##")[0]


def _write_run(workdir, steps=20, extra=True, seed=0):
    """metrics.jsonl as rubric_jax.rl.metrics.MetricsWriter writes it: one strict-JSON object per line,
    {"step": int, "<flattened/name>": float}, arrays as "<name>/<i>", non-finite floats as "NaN"/"Infinity"."""
    rng = np.random.default_rng(seed)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for s in range(steps):
            rec = {"step": s, "reward/mean": 0.3 + 0.02 * s + 0.05 * rng.normal(),
                   "reward/std": "NaN" if s == 7 else 0.2 + 0.01 * rng.normal(),
                   "win_rate_spread/clarity": 0.5 * rng.random(), "win_rate_spread/accuracy": 0.4 * rng.random(),
                   "active_criteria": float(1 + s // 5), "policy_entropy": 2.0 - 0.05 * s,
                   "judge/position_bias": 0.1 * rng.normal(), "completion_len/mean": 200.0 + 3 * s,
                   "loss": rng.normal(), "kl": 0.001 * s}
            if extra:
                rec.update({"rare/weights/0": 0.2, "rare/weights/1": 0.3, "rare/weights/2": 0.5,
                            "rare/entropy": 1.0, "rlmr/penalty": float(s % 3)})
            f.write(json.dumps(rec, allow_nan=False) + "\n")
            if s % 5 == 0:  # a separate record at the same step (e.g. eval metrics)
                f.write(json.dumps({"step": s, "time/eval": 1.5}) + "\n")


@pytest.mark.slow
def test_curves_cli_writes_pngs(tmp_path):
    run_a, run_b = tmp_path / "run_a", tmp_path / "run_b"
    _write_run(run_a, extra=True, seed=0)
    _write_run(run_b, steps=12, extra=False, seed=1)
    out = tmp_path / "plots"
    paths = curves.main([str(run_a), str(run_b), f"--out={out}", "--smooth=0.8"])
    expected = {"reward", "win_rate_spread", "active_criteria", "policy_entropy", "kl", "judge_position_bias",
                "completion_len", "rare", "rare/weights", "rlmr", "curves"}
    assert set(paths) == expected
    for p in paths.values():
        _assert_png(p)
    assert os.path.isfile(out / "rare_weights.png")
    assert not os.path.exists(out / "score.png")  # absent metrics skipped silently
    with Image.open(paths["curves"]) as im:
        assert im.size[0] > 1000  # three panel columns


def test_curves_groups_and_ema():
    groups = dict(curves.panel_groups(["reward/mean", "score/c1", "score/c2", "rare/w/0", "rare/w/1",
                                       "rlmr/penalty", "loss", "time/judge", "judge/saturation",
                                       "judge/length_corr", "adv/criterion_share/c1", "reward/criterion/c1"]))
    assert groups == {"reward": ["reward/mean"], "score": ["score/c1", "score/c2"],
                      "judge_audit": ["judge/length_corr", "judge/saturation"],
                      "criterion_share": ["adv/criterion_share/c1"],
                      "rare/w": ["rare/w/0", "rare/w/1"], "rlmr": ["rlmr/penalty"]}
    np.testing.assert_allclose(curves.ema(np.array([1.0, 3.0]), 0.0), [1.0, 3.0])
    # debiased: first point is itself; second = (0.5*0.5*1 + 0.5*3) / (1 - 0.25)
    np.testing.assert_allclose(curves.ema(np.array([1.0, np.nan, 3.0]), 0.5), [1.0, 1.0, (0.25 + 1.5) / 0.75])


def test_curves_missing_metrics_is_a_clear_error(tmp_path):
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        curves.plot_curves([str(tmp_path / "empty_run")], str(tmp_path / "out"))
    proc = subprocess.run([sys.executable, "-m", "evals.curves", str(tmp_path / "empty_run"),
                           f"--out={tmp_path / 'out'}"], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 2
    assert "no metrics.jsonl" in proc.stderr and "empty_run" in proc.stderr
    assert not os.path.exists(tmp_path / "out" / "curves.png")
