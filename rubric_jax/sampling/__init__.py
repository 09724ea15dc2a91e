"""KV-cache sampling: prefill once, G samples decoded against the prompts as a shared prefix, on-device loop."""

from rubric_jax.sampling.api import encode_prompts, generate, generate_tokens
from rubric_jax.sampling.filters import filter_logits, sample_from_logits
from rubric_jax.sampling.sampler import SampleOutput, bucket_length, left_pad, prefill, sample

__all__ = ["SampleOutput", "bucket_length", "encode_prompts", "filter_logits", "generate", "generate_tokens",
           "left_pad", "prefill", "sample", "sample_from_logits"]
