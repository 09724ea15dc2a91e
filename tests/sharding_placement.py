"""Helper of the sharded check scripts (not a test module): where each variable of an nnx.State actually lives
on the mesh next to where its logical axes say it should (rubric_jax.models.sharding rules), as JSON-able lists."""

from flax import nnx

from rubric_jax.models.sharding import logical_to_spec


def spec_entries(spec, ndim):
    """A PartitionSpec as one JSON-able entry per dimension (None, a mesh axis, or a list of mesh axes)."""
    out = [list(e) if isinstance(e, tuple) else e for e in tuple(spec)]
    return out + [None] * (ndim - len(out))


def placement(state, mesh):
    """{"path/to/var": {"axes", "shape", "actual", "expected"}} for every variable of `state`."""
    out = {}
    for path, var in nnx.to_flat_state(state):
        arr = var.get_value()
        axes = var.get_metadata().get("axes")
        expected = logical_to_spec(axes, arr.shape, mesh) if axes is not None else ()
        out["/".join(map(str, path))] = {
            "axes": None if axes is None else list(axes), "shape": list(arr.shape),
            "actual": spec_entries(arr.sharding.spec, arr.ndim), "expected": spec_entries(expected, arr.ndim)}
    return out
