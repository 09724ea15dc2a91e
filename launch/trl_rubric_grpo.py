"""GRPO in TRL, rewarded by rubric_jax's self-judge: the embedded SmolLM2-135M-Instruct as policy and judge.

    pip install -e ".[bench]"          # trl and peft
    python launch/trl_rubric_grpo.py --out=/tmp/trl_rubric --max_steps=2

The policy is the embedded GGUF loaded by transformers (torch) and trained through LoRA adapters; the reward is
`rubric_jax.integrations.trl.rubric_reward`, which judges every group of `--num_generations` completions with
the frozen JAX judge on the creative-writing rubric (pairwise win rates by default, `--mode=listwise` or
`pointwise`). `--process=subprocess` runs the judge in its own process. The default two steps (2 prompts x 4
completions of 24 tokens, three criteria) took 17.5 minutes on a 2-core CPU shared with two other jobs.
It prints TRL's per-step log (loss, reward, rewards/rubric_pairwise/mean, ...) and writes it to
OUT/log_history.json.
"""

from __future__ import annotations

import argparse
import json
import os


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max_steps", type=int, default=2)
    ap.add_argument("--num_generations", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=8, help="bundled creative-writing prompts in the data set")
    ap.add_argument("--max_completion_length", type=int, default=24)
    ap.add_argument("--criteria", type=int, default=3, help="first N criteria of the creative_writing rubric")
    ap.add_argument("--mode", default="pairwise", choices=("pairwise", "listwise", "pointwise"))
    ap.add_argument("--process", default="inprocess", choices=("inprocess", "subprocess"))
    ap.add_argument("--max_response_tokens", type=int, default=48, help="judge's cut of each completion")
    args = ap.parse_args(argv)

    import torch
    import transformers
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from rubric_jax.data.jsonl import load_jsonl
    from rubric_jax.integrations.trl import rubric_reward
    from rubric_jax.models.loading import embedded_model_path
    from rubric_jax.rubrics.types import load_rubric

    torch.manual_seed(0)
    gguf = embedded_model_path("smollm2-135m-instruct")
    where, name = os.path.dirname(gguf), os.path.basename(gguf)
    tok = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
    tok.pad_token = tok.pad_token or tok.eos_token
    policy = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)

    records = load_jsonl("creative_writing")[: args.prompts]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": r.prompt}]} for r in records])
    criteria = list(load_rubric("creative_writing").criteria)[: args.criteria]
    reward = rubric_reward("smollm2-135m-instruct", criteria, mode=args.mode, num_generations=args.num_generations,
                           process=args.process, max_response_tokens=args.max_response_tokens)

    cfg = GRPOConfig(output_dir=args.out, max_steps=args.max_steps, num_generations=args.num_generations,
                     per_device_train_batch_size=args.num_generations * 2, gradient_accumulation_steps=1,
                     max_completion_length=args.max_completion_length, learning_rate=1e-5, logging_steps=1,
                     save_strategy="no", report_to=[], use_cpu=not torch.cuda.is_available(), seed=0,
                     temperature=0.7, top_p=0.8, top_k=20)
    # transformers dequantizes GGUF tensors to float32 on load but still marks the model quantized, which its
    # Trainer refuses to train; the weights are plain float32, so drop the mark. LoRA, as rubric_jax trains.
    policy.hf_quantizer, policy.is_quantized = None, False
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=policy, processing_class=tok, reward_funcs=reward, args=cfg, train_dataset=data,
                          peft_config=lora)
    try:
        trainer.train()
    finally:
        reward.close()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "log_history.json"), "w") as f:
        json.dump(trainer.state.log_history, f, indent=1)
    for row in trainer.state.log_history:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
