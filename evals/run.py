"""Command line: python -m evals.run --suite=pairwise_elo --models=base=smollm2-135m-instruct,trained=/tmp/run
   --judge=smollm2-135m-instruct --out=DIR [--prompts=N] [--max_new_tokens=..] [--seed=..]
   [--criteria=overall|rubric:creative_writing] [--judges=a,b] [--bootstrap=1000]

--models: comma-separated name=spec; spec = embedded name | HF dir | .gguf | PEFT adapter dir | training workdir,
several joined with '+' pooled as one contestant, or shuffled:<spec> (words shuffled, a known-worse contestant).
--judge / --judges: model path or embedded name (in-process) or openai:MODEL@BASE_URL (remote; the key comes from
OPENAI_API_KEY; --remote_timeout / --remote_retries / --remote_concurrency tune its client).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


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
    p.add_argument("--criteria", default="overall", help="overall | rubric:NAME_OR_PATH")
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


def main(argv=None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        args = parse_args(argv)
    except ValueError as e:  # an unknown suite
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from evals.models import ModelSpecError
    from evals.suites import get_suite
    from rubric_jax.openai_client import ChatError

    if (args.prompts < 0 or args.max_new_tokens < 1 or args.bootstrap < 0 or args.batch_size < 1
            or args.remote_timeout <= 0 or args.remote_retries < 0 or args.remote_concurrency < 1):
        print("error: --prompts >= 0, --max_new_tokens >= 1, --bootstrap >= 0, --batch_size >= 1, "
              "--remote_timeout > 0, --remote_retries >= 0, --remote_concurrency >= 1", file=sys.stderr)
        return 2
    try:
        suite = get_suite(args.suite)
        suite(args)
    except (ModelSpecError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ChatError as e:
        # Every answer and verdict obtained so far is cached: the same command resumes from there.
        print(f"error: remote judge: {e}\n(answers and verdicts received so far are cached; rerun to resume)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
