"""Entry point: python -m rubric_jax.main --config=configs/rcrl.py[:tiny] --workdir=DIR [--config.steps=5]

Restarting the same command resumes from the latest checkpoint in DIR, and loads the programs the previous run
compiled from JAX's persistent compilation cache in DIR/jax_cache (--config.compilation_cache_dir: another
directory, or 'none'; a JAX_COMPILATION_CACHE_DIR in the environment is used instead of the default).
"""

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config file (configs/*.py[:variant])",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "directory for checkpoints, metrics and traces")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "call jax.distributed.initialize (multi-host)")
_COORD = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (with --distributed)")
_NPROC = flags.DEFINE_integer("num_processes", None, "number of processes (with --distributed)")
_PID = flags.DEFINE_integer("process_id", None, "this process' index (with --distributed)")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import jax

    if _DISTRIBUTED.value:
        # With no addresses given, jax detects SLURM / TPU pod / Kubernetes settings itself.
        jax.distributed.initialize(coordinator_address=_COORD.value, num_processes=_NPROC.value,
                                   process_id=_PID.value)
    from rubric_jax.rl.trainer import train

    if not flags.FLAGS["verbosity"].present:
        # Orbax logs every save at INFO through absl; our progress lines are printed, not logged.
        logging.set_verbosity(logging.WARNING)

    logging.info("JAX %s on %s: %s", jax.__version__, jax.default_backend(), jax.devices())
    train(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
