"""Our forward against transformers' on a real checkpoint (a check, not a test: real models are too big for CI).

Loads MODEL through rubric_jax and through transformers (a .gguf is dequantised by both from the same file),
runs one chat-templated prompt through each in f32 and prints the largest and mean logit difference, the logit
scale and how often the two argmaxes agree, and whether both tokenizers give the same ids. The tests check the
same on tiny random checkpoints of every family (tests/test_model.py, tests/test_qwen2.py).

    python benchmarks/model_parity.py --model=qwen2.5-coder-1.5b-instruct [--out=parity.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rubric_jax import load_model, load_tokenizer  # noqa: E402
from rubric_jax.models.loading import resolve_checkpoint  # noqa: E402

PROMPT = "Which answer is better written, A or B? A: The cat sat on the mat. B: mat the on sat cat The."


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.perf_counter()
    model = load_model(args.model)
    tok = load_tokenizer(args.model)
    ids = tok.encode_chat(args.prompt)
    ours = np.asarray(model(jnp.asarray([ids]))[0])[0]
    ours_s = time.perf_counter() - t0
    path = resolve_checkpoint(args.model)
    kw = dict(gguf_file=os.path.basename(path)) if path.endswith(".gguf") else {}
    where = os.path.dirname(path) if path.endswith(".gguf") else path
    t0 = time.perf_counter()
    hf = transformers.AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kw).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(where, **kw)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    hf_s = time.perf_counter() - t0
    hf_ids = hf_tok.apply_chat_template([{"role": "user", "content": args.prompt}], add_generation_prompt=True,
                                        tokenize=False)
    diff = np.abs(ours - ref)
    result = {"model": args.model, "arch": model.cfg.arch, "tokens": len(ids),
              "max_abs_logit_diff": float(diff.max()), "mean_abs_logit_diff": float(diff.mean()),
              "logit_absmax": float(np.abs(ref).max()), "argmax_agree": float((ours.argmax(-1) == ref.argmax(-1)).mean()),
              "same_token_ids": hf_tok.encode(hf_ids, add_special_tokens=False) == ids,
              "seconds_ours_load_and_forward": round(ours_s, 1), "seconds_transformers": round(hf_s, 1)}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
