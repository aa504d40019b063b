"""Several devices: per-client arrays split over a one-axis ``clients`` mesh.

The same jitted round runs unchanged; XLA inserts the collectives for per-cluster sums.
Cluster models and other small arrays are replicated. Use with ``chunk=None`` (a chunked
``lax.map`` walks the client axis sequentially).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def client_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``clients`` over ``devices`` (default: all devices)."""
    return Mesh(np.array(devices if devices is not None else jax.devices()), ("clients",))


def shard_clients(data, mesh: Mesh):
    """``data`` (FederatedData) with every [N, ...] array split on its leading axis over the
    mesh and everything else replicated. N must be a multiple of the number of devices."""
    n, size = data.num_clients, mesh.devices.size
    if n % size:
        raise ValueError(f"{n} clients cannot be split evenly over {size} devices; "
                         f"use a multiple of {size} clients")
    split = NamedSharding(mesh, PartitionSpec("clients"))
    replicated = NamedSharding(mesh, PartitionSpec())
    per_client = {"x", "y", "count", "x_test", "y_test", "count_test", "cluster", "point_cluster"}
    changes = {}
    for name in per_client:
        a = getattr(data, name)
        if a is not None:
            changes[name] = jax.device_put(a, split)
    if data.true_params is not None:
        changes["true_params"] = jax.device_put(data.true_params, replicated)
    return data.replace(**changes)
