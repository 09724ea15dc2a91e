"""Command line: python -m evals.run --suite=pairwise_elo --models=base=smollm2-135m-instruct,trained=/tmp/run
   --judge=smollm2-135m-instruct --out=DIR [--prompts=N] [--max_new_tokens=..] [--seed=..]
   [--criteria=overall|rubric:creative_writing[@ID,ID]] [--judges=a,b] [--bootstrap=1000]

--models: comma-separated name=spec; spec = embedded name | HF dir | .gguf | PEFT adapter dir | training workdir,
several joined with '+' pooled as one contestant, or shuffled:<spec> (words shuffled, a known-worse contestant).
--judge / --judges: model path or embedded name (in-process) or openai:MODEL@BASE_URL (remote; the key comes from
OPENAI_API_KEY; --remote_timeout / --remote_retries / --remote_concurrency tune its client).

Before any answer is generated: --models and each judge spec are resolved (no weights read), a remote judge
must answer one tiny test request, and --data (suites that read a prompt JSONL) is read by the validating
reader (rubric_jax.data.load_jsonl: file and line of a malformed line, the missing field, an empty file).
A failure is one "error: ..." line naming the input. The suite writes into a hidden directory inside --out,
moved into place only when it finishes, so a failed run leaves no partial results there.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile

# Suites whose --data is a prompt JSONL (the others read their own formats through their own flags).
PROMPT_JSONL_SUITES = ("pairwise_elo", "diagnostics", "gv_gap")
# Suites that ask a judge which of two answers is better (--judge_questions chooses how an in-process judge is asked).
PAIRWISE_SUITES = ("pairwise_elo", "rubric_score", "fixed_rubric", "gv_gap")
# Suites that never judge: a --judge given to them is not contacted.
JUDGELESS_SUITES = ("diagnostics",)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="pairwise_elo")
    p.add_argument("--models", required=True, help="name=spec,name=spec (see above)")
    p.add_argument("--base", default="", help="base model of PEFT adapters that do not name one")
    p.add_argument("--judge", default="", help="one judge")
    p.add_argument("--judges", default="", help="several judges, comma-separated (overrides --judge)")
    p.add_argument("--remote_timeout", type=float, default=60.0, help="remote judge: seconds per request")
    p.add_argument("--remote_retries", type=int, default=5,
                   help="remote judge: retries of a request on 429, 5xx, timeouts and connection errors")
    p.add_argument("--remote_concurrency", type=int, default=8, help="remote judge: requests in flight")
    p.add_argument("--criteria", default="overall",
                   help="overall | rubric:NAME_OR_PATH | rubric:NAME_OR_PATH@ID,ID (those criteria; with several, "
                        "pairwise_elo also reports each one's win rates)")
    p.add_argument("--judge_questions", default="better", choices=("better", "worse", "both"),
                   help="pairwise questions of in-process judges (pairwise_elo, rubric_score's pairwise part, "
                        "fixed_rubric's validation, gv_gap): the question asked of each pair (both: better and worse "
                        "pooled, rubric_jax.judge.JudgeConfig.questions; docs/judge.md, "
                        "'A judge apart from the policy')")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--data", default="", help="prompts JSONL (default: evals/data/creative_writing_eval.jsonl)")
    p.add_argument("--prompts", type=int, default=0, help="first N prompts (0 = all)")
    p.add_argument("--max_new_tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top_k", type=int, default=20)
    p.add_argument("--top_p", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=8, help="prompts per sampler call")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals (0: none)")
    p.add_argument("--cache_dir", default=os.environ.get("RUBRIC_JAX_EVAL_CACHE", "~/.cache/rubric_jax/evals"),
                   help="answers, verdicts and file hashes are cached here")
    p.add_argument("--title", default="")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    """The common flags plus the chosen suite's own (its module's `add_args(parser)`, when it has one)."""
    from evals.suites import get_module

    parser = build_parser()
    known, _ = parser.parse_known_args(argv)
    add = getattr(get_module(known.suite), "add_args", None)
    if add is not None:
        add(parser.add_argument_group(f"{known.suite} suite"))
    return parser.parse_args(argv)


def judge_specs(args) -> list[str]:
    """Every judge spec the command line names (--judges, --judge, --reference_judge), once each, in order."""
    if args.suite in JUDGELESS_SUITES:
        return []
    specs = [s.strip() for s in (args.judges or "").split(",")]
    specs += [args.judge.strip(), (getattr(args, "reference_judge", "") or "").strip()]
    return list(dict.fromkeys(s for s in specs if s))


def preflight(args) -> None:
    """Checks every input a suite would only reach after minutes of work: --out, --data, --models, the judges.

    Raises ValueError (a DataError, ModelSpecError or bad judge spec; its message names the input) or
    evals.judges.JudgeUnavailable. Cheap checks come first, so a typo is named before any network wait.
    """
    from evals.judges import check_judge
    from evals.models import parse_models

    out = os.path.expanduser(args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out: {args.out} exists and is not a directory")
    if args.suite in PROMPT_JSONL_SUITES and args.data:
        from rubric_jax.data import DataError, load_jsonl

        if not os.path.isfile(args.data):
            raise DataError(f"--data: no such file: {args.data}")
        try:
            load_jsonl(args.data)
        except DataError as e:
            raise DataError(f"--data: {e}") from None
    parse_models(args.models, base=args.base or None)
    specs = judge_specs(args)
    if getattr(args, "judge_questions", "better") != "better":
        if args.suite not in PAIRWISE_SUITES:
            raise ValueError(f"--judge_questions={args.judge_questions}: the {args.suite} suite asks no pairwise "
                             f"question (it is asked by {', '.join(PAIRWISE_SUITES)})")
        if any(s.startswith("openai:") for s in specs):
            raise ValueError(f"--judge_questions={args.judge_questions}: a remote judge answers the better "
                             f"question only; it reads the model's next-token scores, which an in-process judge "
                             f"exposes")
    for spec in specs:  # every spec parsed first: no network wait before a typo is named
        check_judge(spec, contact=False)
    for spec in specs:
        if spec.startswith("openai:"):
            print(f"checking remote judge {spec} (one test request)", file=sys.stderr, flush=True)
            check_judge(spec, timeout_s=args.remote_timeout, max_retries=args.remote_retries)


def _publish(stage: str, out: str) -> None:
    """Moves everything the suite wrote in `stage` into `out`, replacing files of an earlier run."""
    for name in sorted(os.listdir(stage)):
        src, dst = os.path.join(stage, name), os.path.join(out, name)
        if os.path.isdir(dst) and not os.path.islink(dst):
            shutil.rmtree(dst)
        elif os.path.isdir(src) and os.path.lexists(dst):
            os.unlink(dst)
        os.replace(src, dst)


def run_suite(suite, args) -> None:
    """Runs `suite(args, tools)` with args.out, and the tools' writer, pointing at a hidden staging directory
    inside --out, then publishes.

    A run that fails (or is interrupted) removes its staging directory, and --out if this run created it, so
    no half-written answers.jsonl or report sits beside (or replaces) a finished run's files. The stage is
    inside --out, so publishing is a rename on one file system.
    """
    out = os.path.abspath(os.path.expanduser(args.out))
    created = not os.path.isdir(out)
    os.makedirs(out, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".partial-", dir=out)
    ok = False
    try:
        args.out = stage
        from evals.tools import SuiteTools

        suite(args, SuiteTools(args))
        _publish(stage, out)
        ok = True
    finally:
        args.out = out
        shutil.rmtree(stage, ignore_errors=True)
        if not ok and created:
            try:
                os.rmdir(out)  # only when empty: never takes anything but what this run made
            except OSError:
                pass


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        args = parse_args(argv)
    except ValueError as e:  # an unknown suite
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from evals.judges import JudgeUnavailable
    from evals.models import ModelSpecError
    from evals.suites import get_suite
    from rubric_jax.openai_client import ChatError, redact

    if (args.prompts < 0 or args.max_new_tokens < 1 or args.bootstrap < 0 or args.batch_size < 1
            or args.remote_timeout <= 0 or args.remote_retries < 0 or args.remote_concurrency < 1):
        print("error: --prompts >= 0, --max_new_tokens >= 1, --bootstrap >= 0, --batch_size >= 1, "
              "--remote_timeout > 0, --remote_retries >= 0, --remote_concurrency >= 1", file=sys.stderr)
        return 2
    # Messages are redacted once more here: they may quote a server's body, and this is where they are printed.
    secret = [os.environ.get("OPENAI_API_KEY")]
    try:
        preflight(args)
    except (ModelSpecError, ValueError, FileNotFoundError) as e:
        print(f"error: {redact(str(e), secret)}", file=sys.stderr)
        return 2
    except JudgeUnavailable as e:
        print(f"error: {redact(str(e), secret)}\n(nothing was generated; check the judge's URL, model name and "
              f"OPENAI_API_KEY)", file=sys.stderr)
        return 1
    try:
        run_suite(get_suite(args.suite), args)
    except (ModelSpecError, ValueError, FileNotFoundError) as e:
        print(f"error: {redact(str(e), secret)}", file=sys.stderr)
        return 2
    except ChatError as e:
        # Every answer and verdict obtained so far is cached: the same command resumes from there.
        print(f"error: remote judge: {redact(str(e), secret)}\n(answers and verdicts received so far are cached; "
              f"rerun to resume)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
