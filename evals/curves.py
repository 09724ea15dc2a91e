"""Training curves from one or more runs' `metrics.jsonl`, as PNGs.

    python -m evals.curves WORKDIR [WORKDIR ...] --out=DIR [--smooth=0.9] [--labels=a,b]

Panels (each skipped when none of its metrics was logged):
  reward               reward/mean, reward/std
  win_rate_spread      win_rate_spread/<criterion id>   (one line per criterion)
  score                score/<criterion id>
  active_criteria      active_criteria
  policy_entropy       policy_entropy
  kl                   kl, the policy's KL to its reference (0 throughout when loss.kl_coef = 0: no reference pass)
  judge_position_bias  judge/position_bias
  judge_audit          judge/length_corr, judge/first_position_rate, judge/saturation: the judge-bias audit
                       (rank correlation of reward with length; share of verdicts for the first-shown response;
                       share of pointwise scores at the scale's top), with its reference lines at 0 and 1/2
  criterion_share      adv/criterion_share/<criterion id>: each criterion's share of the advantage
  completion_len       completion_len/mean
  rare..., rlmr...     any metric under rare/ or rlmr/, one panel per prefix group: the metric name without its
                       last "/" component ("rare/weights/0", "rare/weights/1" -> panel "rare/weights";
                       "rlmr/penalty" -> panel "rlmr")

Several workdirs are overlaid, each labelled by its directory name (or --labels). One PNG per panel
(`<panel>.png`, "/" -> "_") plus all panels in one figure, `curves.png`. `--smooth=a` draws an exponential moving
average (weight a on the past; 0 = off) over the faint raw curve.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Optional, Sequence

import numpy as np

__all__ = ["PANELS", "load_run", "panel_groups", "ema", "plot_curves", "main"]

# (panel name, exact metric names, metric-name prefixes)
PANELS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("reward", ("reward/mean", "reward/std"), ()),
    ("win_rate_spread", (), ("win_rate_spread/",)),
    ("score", (), ("score/",)),
    ("active_criteria", ("active_criteria",), ()),
    ("policy_entropy", ("policy_entropy",), ()),
    ("kl", ("kl",), ()),
    ("judge_position_bias", ("judge/position_bias",), ()),
    ("judge_audit", ("judge/length_corr", "judge/first_position_rate", "judge/saturation"), ()),
    ("criterion_share", (), ("adv/criterion_share/",)),
    ("completion_len", ("completion_len/mean",), ()),
)
GENERIC_PREFIXES = ("rare/", "rlmr/")
METRICS_FILE = "metrics.jsonl"  # = rubric_jax.rl.metrics.METRICS_FILE


def load_run(workdir: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{metric name: (steps, values)} from `<workdir>/metrics.jsonl`, sorted by step (records may each hold a
    subset of the metrics). Raises FileNotFoundError when the file is missing, ValueError when it is empty."""
    path = os.path.join(os.fspath(workdir), METRICS_FILE)
    if not os.path.isfile(path):  # checked before importing rubric_jax (which imports jax)
        raise FileNotFoundError(f"{workdir}: no {METRICS_FILE} (expected {path}); is this a training workdir?")
    from rubric_jax.rl.metrics import read_metrics

    records = read_metrics(workdir)
    if not records:
        raise ValueError(f"{path}: no metric records")
    series: dict[str, list] = {}
    for rec in records:
        if "step" not in rec:
            continue
        step = int(rec["step"])
        for k, v in rec.items():
            if k == "step" or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            series.setdefault(k, []).append((step, float(v)))
    out = {}
    for k, pts in series.items():
        pts.sort(key=lambda t: t[0])
        out[k] = (np.array([s for s, _ in pts], dtype=np.int64), np.array([v for _, v in pts], dtype=np.float64))
    return out


def panel_groups(metric_names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """[(panel name, [metric names])] for the given metric names, in PANELS order then the generic rare/ rlmr/
    groups (sorted); panels with no metric are left out."""
    names = sorted(set(metric_names))
    groups = []
    for panel, exact, prefixes in PANELS:
        ms = [m for m in exact if m in names] + [m for m in names if any(m.startswith(p) for p in prefixes)]
        if ms:
            groups.append((panel, ms))
    generic: dict[str, list[str]] = {}
    for m in names:
        if any(m.startswith(p) for p in GENERIC_PREFIXES):
            generic.setdefault(m.rsplit("/", 1)[0], []).append(m)
    groups += sorted(generic.items())
    return groups


def ema(values: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential moving average, out_t = alpha * out_{t-1} + (1 - alpha) * x_t, debiased like TensorBoard's
    (divided by 1 - alpha^n over the n finite points so far); non-finite points are skipped (they keep the
    previous value). alpha = 0 returns the values unchanged."""
    x = np.asarray(values, dtype=np.float64)
    if alpha <= 0:
        return x.copy()
    if not 0 <= alpha < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {alpha}")
    out = np.empty_like(x)
    acc, n, last = 0.0, 0, math.nan
    for i, v in enumerate(x):
        if math.isfinite(v):
            acc = alpha * acc + (1 - alpha) * v
            n += 1
            last = acc / (1 - alpha ** n)
        out[i] = last
    return out


def _short(metric: str, panel: str) -> str:
    """Legend name of a metric inside its panel: the part after the panel's prefix, when it has one."""
    for p in (panel + "/", "win_rate_spread/", "score/", "adv/criterion_share/", "judge/"):
        if metric.startswith(p) and len(metric) > len(p):
            return metric[len(p):]
    return metric


def _draw(ax, panel: str, metrics: list[str], runs: list[tuple[str, dict]], smooth: float) -> None:
    import matplotlib.pyplot as plt

    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    styles = ["-", "--", ":", "-."]
    multi = len(runs) > 1
    n_lines = 0
    for ri, (label, series) in enumerate(runs):
        for mi, m in enumerate(metrics):
            if m not in series:
                continue
            steps, vals = series[m]
            color = colors[(mi if len(metrics) > 1 or not multi else ri) % len(colors)]
            ls = styles[ri % len(styles)] if len(metrics) > 1 else "-"
            name = _short(m, panel)
            line_label = f"{label}: {name}" if multi else name
            if smooth > 0:
                ax.plot(steps, vals, color=color, ls=ls, alpha=0.25, lw=0.8)
                ax.plot(steps, ema(vals, smooth), color=color, ls=ls, lw=1.5, label=line_label)
            else:
                ax.plot(steps, vals, color=color, ls=ls, lw=1.3, label=line_label,
                        marker="." if steps.size < 30 else None)
            n_lines += 1
    if panel == "judge_audit":  # an unbiased judge: no length correlation, first-shown wins half the time
        for y in (0.0, 0.5):
            ax.axhline(y, color="0.6", lw=0.7, ls=":")
    ax.set_title(panel)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if n_lines:
        ax.legend(fontsize=7 if n_lines <= 12 else 5, ncol=1 if n_lines <= 8 else 2, loc="best")


def plot_curves(workdirs: Sequence[str], out_dir: str, *, smooth: float = 0.0,
                labels: Optional[Sequence[str]] = None) -> dict[str, str]:
    """Plots the runs' curves; returns {panel name: png path} plus {"curves": combined png path}.

    Raises FileNotFoundError for a workdir without metrics.jsonl and ValueError when no plottable metric
    exists in any run."""
    if not workdirs:
        raise ValueError("no workdirs given")
    if labels is not None and len(labels) != len(workdirs):
        raise ValueError(f"{len(labels)} labels for {len(workdirs)} workdirs")
    if not 0 <= smooth < 1:
        raise ValueError(f"smooth must be in [0, 1), got {smooth}")
    runs = []
    for i, wd in enumerate(workdirs):
        label = labels[i] if labels is not None else (os.path.basename(os.path.normpath(os.fspath(wd))) or str(wd))
        runs.append((label, load_run(wd)))
    groups = panel_groups([m for _, s in runs for m in s])
    if not groups:
        known = ", ".join([m for _, e, _ in PANELS for m in e] + [p + "*" for _, _, ps in PANELS for p in ps]
                          + [p + "*" for p in GENERIC_PREFIXES])
        raise ValueError(f"no plottable metrics in {list(workdirs)} (looked for {known})")
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths: dict[str, str] = {}
    for panel, metrics in groups:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        _draw(ax, panel, metrics, runs, smooth)
        fig.subplots_adjust(left=0.11, right=0.97, bottom=0.12, top=0.92)  # fixed margins: cheaper than tight_layout
        path = os.path.join(out_dir, panel.replace("/", "_") + ".png")
        fig.savefig(path)
        plt.close(fig)
        paths[panel] = path
    ncols = min(3, len(groups))
    nrows = int(math.ceil(len(groups) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 3.6 * nrows), dpi=90, squeeze=False)
    for ax, (panel, metrics) in zip(axes.flat, groups):
        _draw(ax, panel, metrics, runs, smooth)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle(" vs ".join(label for label, _ in runs))
    fig.tight_layout()
    path = os.path.join(out_dir, "curves.png")
    fig.savefig(path)
    plt.close(fig)
    paths["curves"] = path
    return paths


def main(argv: Optional[Sequence[str]] = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(prog="python -m evals.curves",
                                     description="Plot training curves from metrics.jsonl of one or more workdirs.")
    parser.add_argument("workdirs", nargs="+", help="training workdirs (each with a metrics.jsonl)")
    parser.add_argument("--out", required=True, help="output directory for the PNGs")
    parser.add_argument("--smooth", type=float, default=0.0,
                        help="EMA weight on the past in [0, 1) (0: no smoothing; e.g. 0.9)")
    parser.add_argument("--labels", default=None, help="comma-separated legend labels, one per workdir")
    args = parser.parse_args(argv)
    labels = args.labels.split(",") if args.labels else None
    try:
        paths = plot_curves(args.workdirs, args.out, smooth=args.smooth, labels=labels)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))  # exits with status 2 and the message on stderr
    for name, path in paths.items():
        print(f"{name}: {path}")
    return paths


if __name__ == "__main__":
    main(sys.argv[1:])
