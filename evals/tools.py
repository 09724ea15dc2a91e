"""What `evals.run` hands a suite besides its command line: `run(args, tools)`.

    tools = SuiteTools(args)                 # once per run, after args.out points at the staging directory
    members = tools.load(tools.contestants(min_count=2))
    answers = tools.answers(members, prompts)          # {name: [each member's answers]}
    judge = tools.judge(spec)                          # one judge object per spec for the whole run
    tools.out.jsonl("answers.jsonl", rows); tools.out.json("results.json", result)

The tools carry what every suite did alike: the run's sampling settings, answer cache, batch size and
progress flag for generation; the remote-client flags and --judge_questions for judges and scorers; one
writer for the output directory. A suite keeps its own data, statistics and report text.

The model, generation, judge and scorer functions are looked up in their modules at each call (evals.models,
evals.generate, evals.judges, evals.scorers), so a test that replaces one there replaces it for every suite.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Sequence

__all__ = ["OutputWriter", "SuiteTools"]


class OutputWriter:
    """Writes a run's files into one directory (created on first use, so a suite that fails its own checks
    leaves nothing behind when run outside evals.run). Every JSON goes through evals.report.json_text."""

    def __init__(self, directory: str):
        self.dir = directory

    def path(self, name: str) -> str:
        """Where `name` goes, for files other code writes (plots, .npz)."""
        os.makedirs(self.dir, exist_ok=True)
        return os.path.join(self.dir, name)

    def _write(self, name: str, text: str) -> str:
        # through a temporary file, as write_json does: a crash mid-write keeps an earlier file whole
        path = self.path(name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return path

    def json(self, name: str, obj) -> str:
        """Indented strict JSON (evals.report.write_json)."""
        from evals.report import write_json

        return write_json(self.path(name), obj)

    def jsonl(self, name: str, rows: Iterable) -> str:
        """One strict JSON object per line (NaN and infinities null, non-ASCII kept)."""
        from evals.report import json_text

        return self._write(name, "".join(json_text(r) + "\n" for r in rows))

    def text(self, name: str, text: str) -> str:
        return self._write(name, text)


class SuiteTools:
    """Generation, judges, scorers, logging and the output writer, configured once from the command line."""

    def __init__(self, args):
        from evals.generate import GenSettings

        self.args = args
        self.cache_dir = os.path.abspath(os.path.expanduser(args.cache_dir))
        self.settings = GenSettings.from_args(args)
        self.quiet = bool(args.quiet)
        self.out = OutputWriter(args.out)
        self._judges: dict[str, object] = {}

    def log(self, msg: str, end: str = "\n") -> None:
        """Progress on stderr; --quiet silences it (a suite's result table goes to stdout regardless)."""
        if not self.quiet:
            print(msg, end=end, file=sys.stderr, flush=True)

    # ---- contestants and their answers ------------------------------------------------------------------

    def contestants(self, *, min_count: int = 1) -> list:
        """--models (with --base) parsed into evals.models.Contestant; no weights are read."""
        from evals.models import parse_models

        cs = parse_models(self.args.models, base=self.args.base or None)
        if len(cs) < min_count:
            raise ValueError(f"--models: {getattr(self.args, 'suite', 'this suite')} needs at least {min_count} "
                             f"contestants, got {len(cs)}")
        return cs

    def load(self, contestants: Sequence | None = None, *, announce: bool | None = None) -> dict[str, list]:
        """name -> its members (evals.models.load_contestants; weights load only when an answer is missing).
        Every --models entry when `contestants` is None; announce (default: unless --quiet) prints each."""
        from evals.models import load_contestants

        cs = self.contestants() if contestants is None else list(contestants)
        return load_contestants(cs, self.cache_dir, announce=not self.quiet if announce is None else announce)

    def generate_kwargs(self, *, seed: int | None = None, desc: str = "", settings=None) -> dict:
        """The keywords of evals.generate.generate_answers for this run (seed defaults to --seed), for code
        that wraps generation (the diagnostics suite records entropies around it)."""
        return dict(seed=self.args.seed if seed is None else int(seed), settings=settings or self.settings,
                    cache_dir=self.cache_dir, batch_size=self.args.batch_size, progress=not self.quiet, desc=desc)

    def generate(self, member, prompts: Sequence[str], *, seed: int | None = None, desc: str = "",
                 settings=None) -> list[str]:
        """One answer per prompt from `member`, through the answer cache."""
        from evals.generate import generate_answers

        return generate_answers(member, prompts, **self.generate_kwargs(seed=seed, desc=desc, settings=settings))

    def answers(self, members: dict[str, list], prompts: Sequence[str],
                seeds: Sequence[int] | None = None) -> dict[str, list[list[str]]]:
        """answers[name][member][k] for every member of every contestant; prompt k is sampled under seeds[k]
        (default: --seed for all), one generate call per distinct seed, so a batch never mixes seeds."""
        seeds = [self.args.seed] * len(prompts) if seeds is None else list(seeds)
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        out = {}
        for name, ms in members.items():
            out[name] = []
            for k, m in enumerate(ms):
                got = [""] * len(prompts)
                for s in sorted(set(seeds)):
                    idx = [i for i, x in enumerate(seeds) if x == s]
                    texts = self.generate(m, [prompts[i] for i in idx], seed=s,
                                          desc=f"{name}[{k}]" if len(ms) > 1 else name)
                    for i, t in zip(idx, texts):
                        got[i] = t
                out[name].append(got)
        return out

    # ---- judges and scorers -----------------------------------------------------------------------------

    def _named_judges(self) -> list[str]:
        return [s.strip() for s in (self.args.judges or self.args.judge or "").split(",") if s.strip()]

    def judge_specs(self) -> list[str]:
        """The pairwise judges: --judges (comma-separated) or else --judge; at least one."""
        specs = self._named_judges()
        if not specs:
            raise ValueError("--judge: give a judge model (path, embedded name or openai:MODEL@BASE_URL)")
        return specs

    def judge_spec(self) -> str:
        """The judge of a suite that takes exactly one (--judges or else --judge, naming one model)."""
        specs = self._named_judges()
        if len(specs) != 1:
            raise ValueError("--judge: give exactly one judge model (path, embedded name or openai:MODEL@BASE_URL)")
        return specs[0]

    def judge(self, spec: str):
        """The pairwise judge for `spec` (evals.judges.suite_judge: remote flags, --judge_questions). One
        object per spec, so a suite asking twice (a judge that is also its reference) shares its state."""
        from evals.judges import suite_judge

        key = spec.strip()
        if key not in self._judges:
            self._judges[key] = suite_judge(self.args, key, self.cache_dir)
        return self._judges[key]

    def scorer(self, spec: str, **local):
        """A pointwise scorer (evals.scorers.make_scorer): a remote one with --remote_timeout and
        --remote_concurrency, else an in-process one with `local` (mode=..., gen_max_new_tokens=...)."""
        from evals.scorers import make_scorer

        if spec.strip().startswith("openai:"):
            return make_scorer(spec, self.cache_dir, remote=dict(timeout_s=self.args.remote_timeout,
                                                                 concurrency=self.args.remote_concurrency))
        return make_scorer(spec, self.cache_dir, **local)
