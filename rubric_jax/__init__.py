"""rubric_jax: GRPO + LoRA post-training with self-judged rubric rewards (RcRL, RARE, RLMR) in JAX/Flax NNX."""

from rubric_jax.models.config import PRESETS, ModelConfig
from rubric_jax.models.loading import CheckpointError, load_model
from rubric_jax.models.tokenizer import Tokenizer, load_tokenizer
from rubric_jax.models.transformer import KVCache, Transformer, init_model

__all__ = ["ModelConfig", "PRESETS", "CheckpointError", "load_model", "Tokenizer", "load_tokenizer",
           "KVCache", "Transformer", "init_model", "generate"]


def generate(*args, **kwargs):
    """See rubric_jax.sampling.generate."""
    from rubric_jax.sampling.api import generate as _generate

    return _generate(*args, **kwargs)
