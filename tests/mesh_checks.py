"""Runs several of the 8-device check scripts in one process (see test_sharding.py: mesh_check), so the session
pays one interpreter, jax import and device set-up for all of them instead of one per check.

  python tests/mesh_checks.py CKPT OUT.json mesh_context_check sharded_forward_check ...

Writes {name: result dict, or {"error": traceback}} to OUT.json: a failing check fails only its own test.
"""

import importlib
import json
import os
import sys
import traceback

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"


def main(ckpt, out, names):
    results = {}
    for name in names:
        try:
            results[name] = importlib.import_module(name).result(ckpt)
        except Exception:  # noqa: BLE001 - reported to the test that asked for this check
            results[name] = {"error": traceback.format_exc()}
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
