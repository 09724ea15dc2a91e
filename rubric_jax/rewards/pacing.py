"""Automatic curriculum pacing: add the next criterion when the newest one stops improving on held-out prompts.

Source: "Rubric Curriculum RL: Exploiting the Generation-Verification Gap in Non-Verifiable Domains" (the RcRL
paper). Its curriculum adds one criterion every `interval` steps; its pacing study (section 5.2, Figure 8) trains
on one criterion alone and finds held-out quality rising for about 100 steps and then falling, and its future
work (section 6.2) proposes detecting each criterion's turning point instead of a uniform interval. This module
is that proposal as a pure rule over logged readings; rubric_jax.methods.rcrl.pacing_phase takes the readings (the
policy's win rate against the base policy's cached answers on held-out prompts, judged on the newest criterion
in both orders) and feeds them in.

The rule. Criterion n (curriculum position n - 1) arrives at step s_n, s_1 = 0. Readings of the newest criterion
are taken at s_n, s_n + E, s_n + 2E, ... (E = `every`) while steps remain before s_n + max_interval; call them
h_1..h_m (h_1 is taken at arrival, before any training on the criterion, and is the reference). With window W:

    improvement  D_m = max(h_{m-W+1}, ..., h_m) - max(h_1, ..., h_{m-W})       (defined for m >= W + 1)
    plateau      m >= W + 1  and  D_m <= epsilon

At every step t the next criterion arrives (s_{n+1} = t) when

    t - s_n >= max_interval                                   (reason "max_interval"), or
    t - s_n >= min_interval  and  plateau over the readings so far  (reason "plateau").

Otherwise the reason is "min_interval" (plateau, but too soon), "warmup" (fewer than W + 1 readings) or
"improving". Once all C criteria are active nothing more is read ("complete"). Comparing best against best
(not last against first) is the early-stopping "patience" test: a noisy dip does not fire it, a decline after a
peak does, which is the turning point Figure 8 shows.

Weights are the curriculum's (`curriculum_weights`, docs/method.md) for K = the number of arrived criteria.

reward.pacing="monitor" takes the same readings but keeps the fixed schedule (`decide_fixed`: criterion n
arrives at step (n - 1) * interval, reason "schedule"), so a fixed-paced run logs the held-out win rates an
auto-paced run decides on, and the two can be compared.
Everything here is pure and host-side (Python ints and floats); `PacingState` is immutable and round-trips
through plain JSON for the checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from rubric_jax.rewards.curriculum import CURRICULUM_MODES, curriculum_weights

PACING_MODES = ("fixed", "auto", "monitor")
STATE_VERSION = 1
ARRIVAL_REASONS = ("start", "plateau", "max_interval", "schedule")
REASONS = ("plateau", "max_interval", "min_interval", "warmup", "improving", "complete", "schedule", "scheduled")
# Win rates are means of float32 verdicts: an improvement equal to epsilon on paper must count as "not more
# than epsilon" even when its float difference lands a few ulps above (0.52 - 0.50 > 0.02 in binary).
_TOL = 1e-9


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class PacingConfig:
    """When the held-out win rate is read and how a plateau is recognised (the rule: module docstring).

    Defaults are for the paper's fixed interval of 100 steps (creative writing); `for_interval` scales them.

    every = 10: ten readings per fixed interval. Figure 8's turning point sits near step 100, so a 10-step
        grid places an arrival within 10 steps of where the readings turn. A reading is `prompts` greedy answers
        and 2 * `prompts` one-criterion judgments: 16 answers per 10 steps, about 2.5% of the 64 rollouts a
        step samples.
    window = 3: a plateau needs three readings (30 steps) in a row without a new best, enough to ride out
        one noisy reading of a 16-prompt estimate, short enough to act soon after the turn.
    epsilon = 0.02: a 2-point move of the win rate is small against the spread of a 16-prompt estimate;
        counting gains up to it as no progress keeps a criterion from being held by rounding-level movement.
    min_interval = 50: half the fixed interval. An early flat stretch may only mean the adapters have not
        moved yet, not that the criterion is spent; the floor keeps an arrival off the first few readings.
    max_interval = 200: twice the fixed interval and the whole length of the paper's single-criterion runs,
        whose held-out quality was already falling well before their end: no criterion is kept longer than
        that study trained one.
    prompts = 16: held-out prompts per reading; twice the 8 prompts of a training step.
    seed: picks the held-out prompts (rubric_jax.methods.rcrl.pacing_phase.split_records).
    """

    every: int = 10
    window: int = 3
    epsilon: float = 0.02
    min_interval: int = 50
    max_interval: int = 200
    prompts: int = 16
    seed: int = 0

    def __post_init__(self):
        for name in ("every", "window", "min_interval", "max_interval", "prompts", "seed"):
            v = getattr(self, name)
            if not _is_int(v):
                raise ValueError(f"pacing.{name} must be an int, got {v!r}")
        for name in ("every", "window", "min_interval", "prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"pacing.{name} must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"pacing.seed must be >= 0, got {self.seed}")
        eps = self.epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not math.isfinite(eps) \
                or not 0 <= eps < 1:
            raise ValueError(f"pacing.epsilon must be a win-rate difference in [0, 1), got {eps!r}")
        if self.max_interval <= self.min_interval:
            raise ValueError(f"pacing.max_interval must be > pacing.min_interval={self.min_interval}, got "
                             f"{self.max_interval} (equal bounds are the fixed schedule: reward.pacing='fixed')")
        if self.earliest_plateau >= self.max_interval:
            raise ValueError(
                f"pacing.window={self.window} readings every pacing.every={self.every} steps need "
                f"{self.every * self.window} steps after an arrival, and pacing.min_interval={self.min_interval}: "
                f"a plateau can never arrive before pacing.max_interval={self.max_interval}; lower every or window, "
                f"or raise max_interval")

    @property
    def earliest_plateau(self) -> int:
        """Fewest steps after an arrival at which a plateau can bring the next criterion: W + 1 readings E apart
        span E * W steps, and never before min_interval."""
        return max(self.min_interval, self.every * self.window)

    @classmethod
    def for_interval(cls, interval: int, *, every: int = 0, window: int = 0, epsilon: float = 0.02,
                     min_interval: int = 0, max_interval: int = 0, prompts: int = 16, seed: int = 0) -> PacingConfig:
        """The defaults scaled to a fixed schedule of `interval` steps; a field given as non-zero is kept.

        every = max(1, interval // 10), min_interval = max(1, interval // 2), max_interval = 2 * interval,
        window = 3 unless the readings that fit before max_interval are fewer: min(3, (max_interval - 1) // every).
        interval 100 gives the class defaults; HealthBench's 50 gives 5 / 25 / 100 / 3; the CPU smoke run's 1
        gives every 1, min 1, max 2, window 1 (at most one step per criterion more than the fixed schedule).
        """
        if not _is_int(interval) or interval < 1:
            raise ValueError(f"reward.interval must be an int >= 1, got {interval!r}")
        every = every or max(1, interval // 10)
        min_interval = min_interval or max(1, interval // 2)
        max_interval = max_interval or 2 * interval
        window = window or max(1, min(3, (max_interval - 1) // every))
        return cls(every=every, window=window, epsilon=epsilon, min_interval=min_interval,
                   max_interval=max_interval, prompts=prompts, seed=seed)


@dataclasses.dataclass(frozen=True)
class PacingState:
    """Where the curriculum stands: when each active criterion arrived and what the readings were.

    arrivals[n]: step at which curriculum position n became active (arrivals[0] = 0; strictly increasing).
    reasons[n]: why ("start", "plateau" or "max_interval").
    history: (step, win rate) readings of the newest criterion since it arrived (the rule's h_1..h_m).
    evaluations: every reading of the run as (step, curriculum position, win rate), for analysis.
    Immutable, so a trainer's between-steps snapshot is the object itself.
    """

    arrivals: tuple[int, ...] = (0,)
    reasons: tuple[str, ...] = ("start",)
    history: tuple[tuple[int, float], ...] = ()
    evaluations: tuple[tuple[int, int, float], ...] = ()

    @property
    def num_active(self) -> int:
        return len(self.arrivals)

    @property
    def last_arrival(self) -> int:
        return self.arrivals[-1]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (lists, ints, floats, strings) for the checkpoint's meta dict."""
        return {"version": STATE_VERSION, "arrivals": [int(s) for s in self.arrivals],
                "reasons": list(self.reasons), "history": [[int(s), float(w)] for s, w in self.history],
                "evaluations": [[int(s), int(p), float(w)] for s, p, w in self.evaluations]}

    @classmethod
    def from_dict(cls, d: Any) -> PacingState:
        """Inverse of `to_dict` (after a JSON round trip too); a malformed dict raises naming the field."""
        if not isinstance(d, dict):
            raise ValueError(f"pacing state: expected a dict, got {type(d).__name__}")
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"pacing state.version: expected {STATE_VERSION}, got {d.get('version')!r}")
        try:
            arrivals = tuple(int(s) for s in d["arrivals"])
            reasons = tuple(str(r) for r in d["reasons"])
            history = tuple((int(s), float(w)) for s, w in d["history"])
            evaluations = tuple((int(s), int(p), float(w)) for s, p, w in d["evaluations"])
        except KeyError as e:
            raise ValueError(f"pacing state.{e.args[0]}: missing") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"pacing state: malformed entry ({e})") from None
        if not arrivals or arrivals[0] != 0 or any(b <= a for a, b in zip(arrivals, arrivals[1:])):
            raise ValueError(f"pacing state.arrivals: must start at 0 and increase strictly, got {list(arrivals)}")
        if len(reasons) != len(arrivals) or reasons[0] != "start" or \
                any(r not in ARRIVAL_REASONS[1:] for r in reasons[1:]):
            raise ValueError(f"pacing state.reasons: one per arrival, 'start' then {ARRIVAL_REASONS[1:]}, "
                             f"got {list(reasons)}")
        steps = [s for s, _ in history]
        if any(s < arrivals[-1] for s in steps) or any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"pacing state.history: steps must increase from the last arrival {arrivals[-1]}, "
                             f"got {steps}")
        if any(not 0 <= w <= 1 for _, w in history) or any(not 0 <= w <= 1 for *_, w in evaluations):
            raise ValueError("pacing state.history: win rates must lie in [0, 1]")
        return cls(arrivals, reasons, history, evaluations)


def improvement(history: Sequence[tuple[int, float]], window: int) -> float | None:
    """D_m = max of the last `window` readings - max of the readings before them; None with <= window readings."""
    rates = [float(w) for _, w in history]
    if len(rates) <= window:
        return None
    return max(rates[-window:]) - max(rates[:-window])


def plateaued(history: Sequence[tuple[int, float]], window: int, epsilon: float) -> bool:
    """m >= W + 1 and D_m <= epsilon: the newest criterion's best reading has not risen by more than epsilon
    over the last W readings (`improvement`)."""
    d = improvement(history, window)
    return d is not None and d <= epsilon + _TOL


def reading_due(state: PacingState, step: int, cfg: PacingConfig, num_criteria: int) -> bool:
    """Whether `step` needs a held-out reading of the newest criterion before `decide`: on the every-E grid
    from its arrival, while criteria remain and the step is short of the forced arrival (which needs none)."""
    offset = step - state.last_arrival
    if offset < 0:
        raise ValueError(f"step {step} is before the newest criterion's arrival at step {state.last_arrival}")
    if state.num_active >= num_criteria or offset >= cfg.max_interval:
        return False
    return offset % cfg.every == 0 and not (state.history and state.history[-1][0] == step)


def record(state: PacingState, step: int, win_rate: float) -> PacingState:
    """The state with a reading of the newest criterion (position num_active - 1) at `step` appended."""
    w = float(win_rate)
    if not 0 <= w <= 1:
        raise ValueError(f"held-out win rate must lie in [0, 1], got {win_rate!r}")
    if step < state.last_arrival or (state.history and step <= state.history[-1][0]):
        raise ValueError(f"reading at step {step}: the newest criterion arrived at step {state.last_arrival} and "
                         f"was last read at step {state.history[-1][0] if state.history else None}")
    return dataclasses.replace(state, history=state.history + ((int(step), w),),
                               evaluations=state.evaluations + ((int(step), state.num_active - 1, w),))


def decide(state: PacingState, step: int, cfg: PacingConfig, num_criteria: int) -> tuple[PacingState, bool, str]:
    """(new state, arrived, reason) for the start of `step`, from the readings recorded so far (the rule: module
    docstring). Call once per step, after `record`ing the step's reading when `reading_due`. On arrival the new
    state has the next criterion active from `step` and an empty history (its reference reading comes next)."""
    if num_criteria < 1:
        raise ValueError(f"num_criteria must be >= 1, got {num_criteria}")
    if state.num_active > num_criteria:
        raise ValueError(f"pacing state has {state.num_active} criteria active but the rubric has {num_criteria}")
    offset = step - state.last_arrival
    if offset < 0:
        raise ValueError(f"step {step} is before the newest criterion's arrival at step {state.last_arrival}")
    if state.num_active == num_criteria:
        return state, False, "complete"
    if offset >= cfg.max_interval:
        reason = "max_interval"
    elif not plateaued(state.history, cfg.window, cfg.epsilon):
        return state, False, "warmup" if len(state.history) <= cfg.window else "improving"
    elif offset < cfg.min_interval:
        return state, False, "min_interval"
    else:
        reason = "plateau"
    return dataclasses.replace(state, arrivals=state.arrivals + (int(step),), reasons=state.reasons + (reason,),
                               history=()), True, reason


def decide_fixed(state: PacingState, step: int, interval: int, num_criteria: int) -> tuple[PacingState, bool, str]:
    """`decide` for reward.pacing="monitor": the fixed schedule K(t) = min(C, 1 + floor(t / interval))
    (rubric_jax.rewards.curriculum.num_active) with arrivals recorded in the state, reason "schedule"; steps
    between arrivals give "scheduled" ("complete" once all C are active). Called once per step, so K grows by at
    most one per call; a state further behind (a step skipped) raises."""
    if num_criteria < 1:
        raise ValueError(f"num_criteria must be >= 1, got {num_criteria}")
    if not _is_int(interval) or interval < 1:
        raise ValueError(f"interval must be an int >= 1, got {interval!r}")
    if step < state.last_arrival:
        raise ValueError(f"step {step} is before the newest criterion's arrival at step {state.last_arrival}")
    if state.num_active >= num_criteria:
        return state, False, "complete"
    k = min(num_criteria, 1 + int(step) // int(interval))
    if k <= state.num_active:
        return state, False, "scheduled"
    if k > state.num_active + 1:
        raise ValueError(f"fixed schedule: {k} criteria are due at step {step} but only {state.num_active} arrived "
                         f"(a step was skipped)")
    return dataclasses.replace(state, arrivals=state.arrivals + (int(step),), reasons=state.reasons + ("schedule",),
                               history=()), True, "schedule"


def weights_for_active(k: int, num_criteria: int, alpha: float = 0.5, mode: str = "emphasis",
                       order=None) -> np.ndarray:
    """Curriculum weights with the first k criteria active: exactly `curriculum_weights` at a step where its
    fixed schedule has k active (K(t) = min(C, 1 + floor(t / 1)) = k at t = k - 1 with interval 1). float32[C]."""
    if not _is_int(k) or not 1 <= k <= num_criteria:
        raise ValueError(f"active criteria must be an int in [1, {num_criteria}], got {k!r}")
    if mode not in CURRICULUM_MODES:
        raise ValueError(f"mode must be one of {CURRICULUM_MODES}, got {mode!r}")
    return np.asarray(curriculum_weights(int(k) - 1, num_criteria, 1, alpha=alpha, mode=mode, order=order),
                      np.float32)


def weights_from_state(state: PacingState, num_criteria: int, alpha: float = 0.5, mode: str = "emphasis",
                       order=None) -> np.ndarray:
    """lambda_c for the criteria the state has made active (newest = last arrival), as the fixed curriculum
    would weight the same number of active criteria. float32[C]."""
    return weights_for_active(state.num_active, num_criteria, alpha, mode, order)


def schedule(readings, cfg: PacingConfig, num_criteria: int, steps: int,
             state: PacingState | None = None, start: int = 0) -> PacingState:
    """Runs the rule over steps start..steps-1 with `readings(position, step) -> win rate` standing in for the
    held-out evaluation (a reference reading follows each arrival except the last criterion's, as in
    rubric_jax.methods.rcrl.pacing_phase). For tests and for studying a rule on logged curves."""
    state = state or PacingState()
    for step in range(start, steps):
        if reading_due(state, step, cfg, num_criteria):
            state = record(state, step, readings(state.num_active - 1, step))
        state, arrived, _ = decide(state, step, cfg, num_criteria)
        if arrived and state.num_active < num_criteria:
            state = record(state, step, readings(state.num_active - 1, step))
    return state
