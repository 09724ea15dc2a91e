"""Rubric rewards for trainers outside rubric_jax (`rubric_jax.integrations.trl`: TRL's GRPOTrainer)."""
