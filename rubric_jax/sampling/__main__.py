"""Generation demo: python -m rubric_jax.sampling --prompt "Write a haiku about rain." [--model PATH]

Loads a checkpoint (default: the embedded SmolLM2-135M-Instruct), applies the chat template and samples.
Sampling settings and --model are checked before the model loads (a bad one: one line on stderr, exit
status 2; rubric_jax.errors).
"""

from __future__ import annotations

import argparse
import time

from rubric_jax import load_model, load_tokenizer
from rubric_jax.errors import UserError, check_model_arg, reported
from rubric_jax.sampling.api import encode_prompts, generate_tokens
from rubric_jax.sampling.sampler import check_settings


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rubric_jax.sampling", description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", action="append", required=True, help="user message (repeat for a batch)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="HF checkpoint dir, .gguf file or embedded name")
    ap.add_argument("--tokenizer", default=None, help="defaults to --model")
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top_k", type=int, default=20)
    ap.add_argument("--top_p", type=float, default=0.8)
    ap.add_argument("--min_p", type=float, default=0.0)
    ap.add_argument("--num_samples", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args(argv)
    with reported():
        _sample(args)


def check_context(tokenizer, prompts, max_new_tokens: int, context: int) -> None:
    """UserError unless every prompt (as the chat template encodes it) plus max_new_tokens fits the model's
    context, as the server checks a request: past it the positions are ones the model never saw, and the text
    it samples there is garbage that takes minutes to produce."""
    for i, ids in enumerate(encode_prompts(tokenizer, prompts, chat=True)):
        if len(ids) + max_new_tokens > context:
            room = context - len(ids)
            way_out = (f"shorten the prompt or lower --max_new_tokens to at most {room}" if room > 0 else
                       f"the prompt alone fills the context: shorten it by at least {1 - room} tokens")
            raise UserError(f"--prompt {i + 1} is {len(ids)} tokens and --max_new_tokens={max_new_tokens}: "
                            f"{len(ids) + max_new_tokens} in all, past this model's context of {context} tokens; "
                            f"{way_out}")


def _sample(args):
    try:
        check_settings(max_new_tokens=args.max_new_tokens, num_samples=args.num_samples,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
    except UserError as e:
        raise UserError(f"--{e}") from None  # named as the flag the user typed
    check_model_arg("--model", args.model)

    t0 = time.perf_counter()
    model = load_model(args.model, dtype=args.dtype)
    tokenizer = load_tokenizer(args.tokenizer or args.model)
    print(f"loaded {args.model} in {time.perf_counter() - t0:.1f}s", flush=True)
    check_context(tokenizer, args.prompt, args.max_new_tokens, int(model.cfg.max_position_embeddings))
    t0 = time.perf_counter()
    out = generate_tokens(model, tokenizer, args.prompt, max_new_tokens=args.max_new_tokens,
                          num_samples=args.num_samples, temperature=args.temperature, top_k=args.top_k,
                          top_p=args.top_p, min_p=args.min_p, seed=args.seed)
    dt = time.perf_counter() - t0
    for i, completion in enumerate(out.completions()):
        print(f"\n--- prompt {i // args.num_samples} sample {i % args.num_samples} ---")
        print(tokenizer.decode(completion))
    print(f"\n{int(out.lengths.sum())} tokens in {dt:.1f}s (compilation included)")


if __name__ == "__main__":
    main()
