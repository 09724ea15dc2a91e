"""Entry point: python -m rubric_jax.main --config=configs/rcrl.py[:tiny] --workdir=DIR [--config.steps=5]

Restarting the same command resumes from the latest checkpoint in DIR.
"""

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config file (configs/*.py[:variant])",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "directory for checkpoints, metrics and traces")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import jax

    from rubric_jax.rl.trainer import train

    if not flags.FLAGS["verbosity"].present:
        # Orbax logs every save at INFO through absl; our progress lines are printed, not logged.
        logging.set_verbosity(logging.WARNING)

    logging.info("JAX %s on %s: %s", jax.__version__, jax.default_backend(), jax.devices())
    train(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
