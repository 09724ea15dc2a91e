"""Writes an evaluation's ratings (the dict from `evals.bradley_terry.rate`) as JSON, Markdown and PNG plots.

    paths = write_report(result, "out/eval1", title="Qwen3-0.6B GRPO vs baselines")
    # {"results.json": ..., "report.md": ..., "ratings.png": ..., "win_rates.png": ...}

Plots use matplotlib with the non-interactive Agg backend (no display needed).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

import numpy as np

__all__ = ["write_report", "render_markdown", "plot_ratings", "plot_win_rates"]


def _num(x: Any) -> float:
    """None / missing -> NaN, else float."""
    return float("nan") if x is None else float(x)


def _win_rate_bounds(wr: dict) -> tuple[list, list]:
    """A win-rate block's (lo, hi) matrices, or ([], []) when it has no interval (no bootstrap)."""
    lo, hi = wr.get("lo") or [], wr.get("hi") or []
    return (lo, hi) if any(math.isfinite(_num(v)) for row in lo for v in row) else ([], [])


def _pct_cell(v: Any, lo: list, hi: list, i: int, j: int) -> str:
    """A win rate in percent, with its interval "[lo, hi]" where (i, j) has one."""
    if lo and math.isfinite(_num(lo[i][j])) and math.isfinite(_num(hi[i][j])):
        return f"{100 * _num(v):.1f} [{100 * _num(lo[i][j]):.1f}, {100 * _num(hi[i][j]):.1f}]"
    return f"{100 * _num(v):.1f}"


def _fmt(x: Any, nd: int = 0) -> str:
    v = _num(x)
    return "–" if not math.isfinite(v) else f"{v:.{nd}f}"


def _interval(lo: Any, hi: Any) -> str:
    lo, hi = _num(lo), _num(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "–"
    return f"[{lo:.0f}, {hi:.0f}]"


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def _level_pct(result: dict) -> str:
    level = (result.get("settings") or {}).get("level", 0.95)
    return f"{100 * float(level):g}%"


def render_markdown(result: dict, *, title: str, images: Optional[dict] = None) -> str:
    """The report as Markdown: ratings table (ELO, interval, length-controlled ELO and interval, #comparisons),
    win-rate matrix (row's mean preference over column, %), judge agreement (if any) and settings."""
    models = result.get("models") or []
    pct = _level_pct(result)
    out = [f"# {title}", ""]
    settings = result.get("settings") or {}
    if settings:
        anchor = settings.get("anchor")
        out += [f"Bradley-Terry ratings on the ELO scale"
                + (f" (anchor: {anchor} = {_fmt(settings.get('anchor_rating'))}; intervals are relative to the anchor, "
                   "whose own interval is a point)" if anchor is not None else "")
                + f"; {pct} prompt-bootstrap intervals ({settings.get('bootstrap_reps', '?')} resamples); "
                f"LC = length-controlled.", ""]
    out += ["## Ratings", "",
            f"| rank | model | ELO | {pct} CI | LC ELO | LC {pct} CI | comparisons |",
            "|---:|---|---:|---|---:|---|---:|"]
    for i, m in enumerate(models, 1):
        out.append(f"| {i} | {_md_escape(m.get('name'))} | {_fmt(m.get('elo'))} | "
                   f"{_interval(m.get('lo'), m.get('hi'))} | {_fmt(m.get('lc_elo'))} | "
                   f"{_interval(m.get('lc_lo'), m.get('lc_hi'))} | {m.get('n', '–')} |")
    out.append("")
    if images and images.get("ratings.png"):
        out += [f"![ratings]({os.path.basename(images['ratings.png'])})", ""]

    wr = result.get("win_rate") or {}
    names, mat = wr.get("names") or [], wr.get("matrix") or []
    if names and mat:
        lo, hi = _win_rate_bounds(wr)
        out += ["## Win rates", "", "Row model's mean preference over the column model (%)"
                + (f", with its {pct} prompt-bootstrap interval" if lo else "") + ".", "",
                "| | " + " | ".join(_md_escape(n) for n in names) + " |",
                "|---|" + "---:|" * len(names)]

        def cell(i, j, v):
            return "–" if not math.isfinite(_num(v)) else _pct_cell(v, lo, hi, i, j)

        for i, (n, row) in enumerate(zip(names, mat)):
            out.append(f"| {_md_escape(n)} | " + " | ".join(cell(i, j, v) for j, v in enumerate(row)) + " |")
        out.append("")
        if images and images.get("win_rates.png"):
            out += [f"![win rates]({os.path.basename(images['win_rates.png'])})", ""]

    per_c = result.get("per_criterion") or {}
    if per_c:
        bounds = {cid: _win_rate_bounds(wr) for cid, wr in per_c.items()}
        out += ["## Win rates per criterion", "",
                "Each criterion's own preferences, row model over column model (%)"
                + (f", with {pct} prompt-bootstrap intervals" if any(lo for lo, _ in bounds.values()) else "")
                + ".", "", "| criterion | model | over | win rate |", "|---|---|---|---:|"]
        for cid, wr in per_c.items():
            names, mat = wr.get("names") or [], wr.get("matrix") or []
            lo, hi = bounds[cid]
            for i in range(len(names)):
                for j in range(len(names)):
                    if i != j and math.isfinite(_num(mat[i][j])):
                        out.append(f"| {_md_escape(cid)} | {_md_escape(names[i])} | {_md_escape(names[j])} | "
                                   f"{_pct_cell(mat[i][j], lo, hi, i, j)} |")
        out.append("")

    ag = result.get("judge_agreement")
    if ag:
        judges = ag.get("judges") or []
        out += ["## Judge agreement", "",
                f"Mean pairwise agreement (same side preferred, ties ignored): {_fmt(ag.get('mean_agreement'), 3)}; "
                f"mean correlation of preferences: {_fmt(ag.get('mean_correlation'), 3)}.", "",
                "| judge A | judge B | agreement | correlation | decisive comparisons |", "|---|---|---:|---:|---:|"]
        A, C, N = ag.get("agreement") or [], ag.get("correlation") or [], ag.get("n") or []
        for i in range(len(judges)):
            for j in range(i + 1, len(judges)):
                out.append(f"| {_md_escape(judges[i])} | {_md_escape(judges[j])} | {_fmt(A[i][j], 3)} | "
                           f"{_fmt(C[i][j], 3)} | {N[i][j] if N else '–'} |")
        out.append("")

    if settings:
        out += ["## Settings", "", "```json", json.dumps(settings, indent=2, sort_keys=True), "```", ""]
    return "\n".join(out)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def plot_ratings(result: dict, path: str, *, title: str = "") -> str:
    """Horizontal interval plot: one row per model (best at the top), raw ELO and length-controlled ELO as points
    with their bootstrap intervals as error bars."""
    plt = _pyplot()
    models = list(result.get("models") or [])
    n = len(models)
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.55 * n + 1.5)), dpi=110)
    y = np.arange(n)[::-1].astype(float)  # best (first) at the top
    for key, lo_k, hi_k, dy, color, label in (("elo", "lo", "hi", 0.12, "tab:blue", "ELO"),
                                              ("lc_elo", "lc_lo", "lc_hi", -0.12, "tab:orange", "LC ELO")):
        x = np.array([_num(m.get(key)) for m in models])
        lo = np.array([_num(m.get(lo_k)) for m in models])
        hi = np.array([_num(m.get(hi_k)) for m in models])
        ok = np.isfinite(x)
        if not ok.any():
            continue
        err_ok = ok & np.isfinite(lo) & np.isfinite(hi)
        xerr = np.zeros((2, n))
        xerr[0, err_ok] = np.maximum(0.0, x[err_ok] - lo[err_ok])
        xerr[1, err_ok] = np.maximum(0.0, hi[err_ok] - x[err_ok])
        ax.errorbar(x[ok], y[ok] + dy, xerr=xerr[:, ok], fmt="o", color=color, ecolor=color, capsize=4,
                    label=label + (f" ({_level_pct(result)} CI)" if err_ok.any() else ""))
    anchor_rating = (result.get("settings") or {}).get("anchor_rating")
    if anchor_rating is not None:
        ax.axvline(float(anchor_rating), color="grey", lw=0.8, ls="--")
    ax.set_yticks(y)
    ax.set_yticklabels([str(m.get("name")) for m in models])
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("rating (ELO scale)")
    ax.grid(axis="x", alpha=0.3)
    if n:
        ax.legend(loc="best", fontsize=8)
    ax.set_title(title or "Bradley-Terry ratings")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_win_rates(result: dict, path: str, *, title: str = "") -> str:
    """Heatmap of the win-rate matrix (row's mean preference over column), each cell annotated with its %."""
    plt = _pyplot()
    wr = result.get("win_rate") or {}
    names = [str(x) for x in (wr.get("names") or [])]
    mat = np.array([[_num(v) for v in row] for row in (wr.get("matrix") or [])], dtype=np.float64)
    n = len(names)
    if mat.size == 0:
        mat = np.full((n, n), np.nan)
    size = max(3.5, 0.8 * n + 2.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size), dpi=110)
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="RdBu", vmin=0.0, vmax=1.0)
    for i in range(n):
        for j in range(n):
            v = mat[i, j]
            if math.isfinite(v):
                ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if abs(v - 0.5) > 0.3 else "black")
            else:
                ax.text(j, i, "–", ha="center", va="center", fontsize=8, color="grey")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_yticklabels(names)
    ax.set_xlabel("opponent")
    ax.set_ylabel("model")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="win rate of row over column")
    ax.set_title(title or "Pairwise win rates (%)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def strict_json(x):
    """A JSON-ready copy of `x`: numpy arrays and scalars become lists and numbers, non-finite floats None.

    Every JSON the evaluations write goes through this (`json_text`: `write_json`, and the suites' writer
    evals.tools.OutputWriter for .json and .jsonl alike): NaN and infinities are null, never the `NaN` that
    Python's json writes and strict readers refuse. (The trainer's metrics.jsonl keeps its own round-trip
    encoding, rubric_jax.rl.metrics, so a NaN loss reads back as NaN.)"""
    if isinstance(x, dict):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return strict_json(x.tolist())
    if isinstance(x, (list, tuple)):
        return [strict_json(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def json_text(obj, indent: int | None = None) -> str:
    """strict_json(obj) as JSON text, non-ASCII characters kept (one line when indent is None)."""
    return json.dumps(strict_json(obj), indent=indent, allow_nan=False, default=_json_default, ensure_ascii=False)


def write_json(path: str, obj, indent: int = 2) -> str:
    """Writes json_text(obj) to `path` through a temporary file, so a crash mid-write leaves the old file."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json_text(obj, indent) + "\n")
    os.replace(tmp, path)
    return path


def write_report(result: dict, out_dir: str, *, title: str) -> dict[str, str]:
    """Writes `results.json` (the result dict, with `title` added), `report.md`, `ratings.png` and
    `win_rates.png` under `out_dir` (created if needed); returns {file name: path}."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name)
             for name in ("results.json", "report.md", "ratings.png", "win_rates.png")}
    write_json(paths["results.json"], {"title": title, **result})
    plot_ratings(result, paths["ratings.png"], title=title)
    plot_win_rates(result, paths["win_rates.png"], title=f"{title}: win rates" if title else "")
    with open(paths["report.md"], "w", encoding="utf-8") as f:
        f.write(render_markdown(result, title=title, images=paths))
    return paths
