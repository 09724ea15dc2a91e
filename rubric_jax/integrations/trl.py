"""Rubric rewards as a TRL reward function.

    from trl import GRPOConfig, GRPOTrainer
    from rubric_jax.integrations.trl import rubric_reward

    reward = rubric_reward("smollm2-135m-instruct", "creative_writing", mode="pairwise", num_generations=4)
    GRPOTrainer(model=..., reward_funcs=reward, args=GRPOConfig(num_generations=4, ...), train_dataset=...)

TRL's GRPOTrainer calls each reward function as `f(prompts=..., completions=..., **columns) -> list[float]`
on a whole generation batch, in which the `num_generations` completions of one prompt sit next to each other.
The callable returned here cuts that batch back into groups, judges every group with the frozen rubric_jax
judge (`rubric_jax.rewards_api.score_groups`: pairwise win rates, listwise first-choice scores or pointwise
scores) and returns one float per completion in TRL's order. Groups are judged `max_groups` at a time, so a
large batch never builds one huge judge batch.

Where the judge runs:
  process="inprocess"   the judge lives in the calling process (simplest; JAX and torch then share it).
  process="subprocess"  a separate Python process (`python -m rubric_jax.integrations.trl`) holds the judge
                        and answers over a pipe: JAX's memory and device stay apart from the torch trainer's
                        (`platform="cpu"` keeps the judge off the GPU the trainer uses). It is started on the
                        first call and stopped by `close()` or at exit.

Conversational data works too: a prompt given as chat messages is judged on its last user message, and a
completion given as messages on the text of its assistant message(s).
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import traceback
from typing import Any, Sequence

import numpy as np

__all__ = ["RubricReward", "rubric_reward", "group_blocks", "message_text"]

PROCESSES = ("inprocess", "subprocess")


def message_text(x: Any, role: str | None = None) -> str:
    """The text of a TRL prompt or completion: a string as is; for chat messages ({"role", "content"} dicts)
    the last message of `role` (every message's content when no role is given or none has it)."""
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        x = [x]
    if isinstance(x, (list, tuple)) and all(isinstance(m, dict) and "content" in m for m in x) and x:
        if role is not None:
            picked = [m for m in x if m.get("role") == role]
            if picked:
                return _content(picked[-1]["content"])
        return "\n".join(_content(m["content"]) for m in x)
    raise TypeError(f"expected a string or a list of chat messages, got {type(x).__name__}: {x!r:.200}")


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # multimodal content parts: keep the text ones
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return str(c)


def group_blocks(prompts: Sequence[str], num_generations: int | None) -> list[tuple[int, int]]:
    """[start, stop) index ranges of the groups in a flat TRL batch.

    With `num_generations` G: consecutive blocks of G, each of which must hold one prompt (TRL's sampler
    repeats every prompt G times in a row); without it: maximal runs of equal consecutive prompts."""
    n = len(prompts)
    if num_generations is not None:
        g = int(num_generations)
        if g < 1:
            raise ValueError(f"num_generations must be >= 1, got {num_generations}")
        if n % g:
            raise ValueError(f"{n} completions are not a whole number of groups of num_generations={g}")
        blocks = [(s, s + g) for s in range(0, n, g)]
        for s, e in blocks:
            if any(prompts[i] != prompts[s] for i in range(s, e)):
                raise ValueError(f"completions {s}..{e - 1} should share one prompt (num_generations={g}) but "
                                 "their prompts differ: is num_generations the trainer's?")
        return blocks
    blocks, s = [], 0
    for i in range(1, n + 1):
        if i == n or prompts[i] != prompts[s]:
            blocks.append((s, i))
            s = i
    return blocks


class _LocalScorer:
    """The judge in this process."""

    def __init__(self, model, tokenizer, judge_config):
        from rubric_jax.judge import Verdicts
        from rubric_jax.rewards_api import make_judge

        # a ready judge (the local Judge, whose compiled programs and verdict cache are reused, or a RemoteJudge)
        if isinstance(model, Verdicts):
            if judge_config:
                raise ValueError(f"judge settings {sorted(judge_config)} cannot change a ready Judge")
            self.judge = model
            return
        if isinstance(tokenizer, (str, os.PathLike)):
            from rubric_jax.models.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(str(tokenizer))
        self.judge = make_judge(model, tokenizer, **judge_config)

    def score(self, prompts, groups, criteria, mode, weights, seed):
        from rubric_jax.rewards_api import score_groups

        return score_groups(prompts, groups, criteria, mode=mode, judge=self.judge, weights=weights,
                            seed=seed).rewards

    def close(self):
        pass


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the judge process closed its pipe")
    (n,) = struct.unpack("<Q", head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the judge process closed its pipe mid-message")
    return pickle.loads(data)


class _ProcessScorer:
    """The judge in a child process; requests and answers are length-prefixed pickles over its stdin/stdout
    (the child points its own stdout at stderr, so logging never corrupts the channel)."""

    def __init__(self, model, tokenizer, judge_config, platform):
        if not isinstance(model, (str, os.PathLike)):
            raise ValueError("process='subprocess' needs a model name or path, not a loaded model")
        env = dict(os.environ)
        if platform:
            env["JAX_PLATFORMS"] = platform
        self.proc = subprocess.Popen([sys.executable, "-m", "rubric_jax.integrations.trl"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        atexit.register(self.close)
        self._call(("init", str(model), None if tokenizer is None else str(tokenizer), dict(judge_config)))

    def _call(self, msg):
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"the judge process is not running (exit code {getattr(self.proc, 'returncode', None)})")
        try:
            _send(self.proc.stdin, msg)
            kind, payload = _recv(self.proc.stdout)
        except (EOFError, BrokenPipeError) as e:
            code = self.proc.wait(timeout=30)
            raise RuntimeError(f"the judge process died (exit code {code}); its stderr says why") from e
        if kind == "error":
            raise RuntimeError(f"the judge process failed:\n{payload}")
        return payload

    def score(self, prompts, groups, criteria, mode, weights, seed):
        return self._call(("score", prompts, groups, criteria, mode, weights, seed))

    def close(self):
        proc, self.proc = getattr(self, "proc", None), None
        if proc is not None and proc.poll() is None:
            try:
                _send(proc.stdin, ("exit",))
                proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a stuck child is killed below
                proc.kill()
                proc.wait()


def _worker_main() -> None:
    """The child side of process='subprocess'."""
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints and logs of the judge go to stderr, never into the channel
    sys.stdout = sys.stderr
    scorer = None
    while True:
        try:
            msg = _recv(channel_in)
        except EOFError:
            return
        if msg[0] == "exit":
            return
        try:
            if msg[0] == "init":
                _, model, tokenizer, judge_config = msg
                scorer = _LocalScorer(model, tokenizer, judge_config)
                _send(channel_out, ("ok", None))
            elif msg[0] == "score":
                if scorer is None:
                    raise RuntimeError("score before init")
                _send(channel_out, ("ok", np.asarray(scorer.score(*msg[1:]))))
            else:
                raise ValueError(f"unknown request {msg[0]!r}")
        except Exception:  # noqa: BLE001 - the parent re-raises it with this traceback
            _send(channel_out, ("error", traceback.format_exc()))


class RubricReward:
    """A TRL reward function (see the module docstring); make it with `rubric_reward`."""

    def __init__(self, model, rubric, *, mode, num_generations, weights, tokenizer, process, platform,
                 max_groups, seed, name, judge_config):
        from rubric_jax.rewards_api import MODES, _criteria, _weights

        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if process not in PROCESSES:
            raise ValueError(f"process must be one of {PROCESSES}, got {process!r}")
        if int(max_groups) < 1:
            raise ValueError(f"max_groups must be >= 1, got {max_groups}")
        self.criteria = _criteria(rubric)
        self.weights = _weights(weights, len(self.criteria))
        self.mode, self.num_generations, self.max_groups = mode, num_generations, int(max_groups)
        self.seed, self.calls = int(seed), 0
        self.__name__ = name or f"rubric_{mode}"  # TRL logs rewards/<__name__>
        self._spec = (model, tokenizer, dict(judge_config), process, platform)
        self._scorer = None

    def _get_scorer(self):
        if self._scorer is None:
            model, tokenizer, judge_config, process, platform = self._spec
            self._scorer = (_LocalScorer(model, tokenizer, judge_config) if process == "inprocess"
                            else _ProcessScorer(model, tokenizer, judge_config, platform))
        return self._scorer

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        p_text = [message_text(p, "user") for p in prompts]
        c_text = [message_text(c, "assistant") for c in completions]
        blocks = group_blocks(p_text, self.num_generations)
        out = np.full(len(c_text), np.nan, np.float64)
        by_size: dict[int, list[tuple[int, int]]] = {}
        for b in blocks:
            by_size.setdefault(b[1] - b[0], []).append(b)
        seed = self.seed + self.calls  # fresh listwise presentation orders every call, reproducibly
        self.calls += 1
        for size, bs in sorted(by_size.items()):
            for k in range(0, len(bs), self.max_groups):
                chunk = bs[k:k + self.max_groups]
                rewards = np.asarray(self._get_scorer().score(
                    [p_text[s] for s, _ in chunk], [c_text[s:e] for s, e in chunk], self.criteria, self.mode,
                    self.weights, seed))
                if rewards.shape != (len(chunk), size):
                    raise RuntimeError(f"judge returned rewards of shape {rewards.shape}, expected {(len(chunk), size)}")
                for (s, e), r in zip(chunk, rewards):
                    out[s:e] = r
        if not np.all(np.isfinite(out)):
            raise RuntimeError("the judge produced a non-finite reward")
        return [float(x) for x in out]

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()
            self._scorer = None


def rubric_reward(model_or_path: Any = "smollm2-135m-instruct", rubric: Any = "creative_writing", *,
                  mode: str = "pairwise", num_generations: int | None = None, weights=None, tokenizer=None,
                  process: str = "inprocess", platform: str | None = None, max_groups: int = 8, seed: int = 0,
                  name: str | None = None, readout: str | None = None, **judge_config) -> RubricReward:
    """A reward function for TRL's GRPOTrainer that judges each block of `num_generations` completions as one
    group.

    model_or_path   the judge: an embedded name, HF checkpoint dir or .gguf; in-process only, also a loaded
                    rubric_jax model with its `tokenizer`, or a ready judge (`rubric_jax.judge.Judge` or
                    `RemoteJudge`: any `rubric_jax.judge.Verdicts`).
    rubric          a built-in rubric name, a rubric JSON path, a Rubric or a list of Criterion.
    mode            "pairwise" (win rates), "listwise" or "pointwise" (rewards_api.score_groups).
    num_generations the trainer's; given, every block must share one prompt (checked); None groups runs of
                    equal consecutive prompts.
    weights         per-criterion weights (default equal, normalised to sum 1).
    process         "inprocess" or "subprocess"; `platform` sets JAX_PLATFORMS for the subprocess.
    max_groups      groups per judge call (the adapter's own batching).
    readout         the judge's verdict readout (JudgeConfig.mode: "sign", "logit", "hard"); None = its default.
    judge_config    other JudgeConfig / PromptConfig fields (pairing, max_response_tokens, ...).
    Returns floats in TRL's order; the judge is built on the first call.
    """
    if readout is not None:
        judge_config["mode"] = readout
    return RubricReward(model_or_path, rubric, mode=mode, num_generations=num_generations, weights=weights,
                        tokenizer=tokenizer, process=process, platform=platform, max_groups=max_groups, seed=seed,
                        name=name, judge_config=judge_config)


if __name__ == "__main__":
    _worker_main()
