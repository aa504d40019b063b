"""Several devices and processes: per-client arrays split over a one-axis ``clients`` mesh.

Every array whose leading client axis is N (data, and per-client state: assignments
int32[N], Local / Ditto / SR-FCA per-client models [N, ...], MC momenta) is split on that
axis; cluster models [K, ...] and scalars are replicated. The same jitted round runs
unchanged and XLA inserts the collectives for per-cluster sums. A leaf whose client-axis
position happens to have length N for another reason (K = N clusters) is split too: a
layout choice only, results do not change. A chunked ``lax.map`` over clients walks the
client axis in order, which XLA may not spread over the devices: ``chunk=None`` is the
layout tested with several devices.

Walks split over the devices: inside ``split_clients(mesh)`` every walk over clients in
chunks (``core.clients``) whose client count the mesh's size divides runs under
``shard_map``, each device walking its own block of clients (on a CPU the command line does
this by default, one host device per core: ``fedclust_jax.hostdevices``). What a walk's
per-client function needs of the enclosing computation (cluster models, a round's key)
enters as ``map_clients(..., shared=)``, an explicit replicated argument: a value closed over
from outside keeps the enclosing mesh in its type, and operations that copy their operand's
sharding (``jnp.tril``, sorting) refuse it inside the split walk.

Several processes (hosts): call ``initialize_processes`` first in every process, build the
same data in every process (same seed), then run with ``devices`` = all devices of all
processes. ``jax.device_put`` of a host array that is equal on every process onto a global
sharding keeps each process's own shards. Values are read back on the host with
``to_host`` (an all-gather where a process does not hold the whole array).
"""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "clients"


def client_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``clients`` over ``devices`` (default: all devices of all processes)."""
    return Mesh(np.array(devices if devices is not None else jax.devices()), (AXIS,))


def check_divisible(num_clients: int, mesh: Mesh):
    size = mesh.devices.size
    if num_clients % size:
        raise ValueError(f"{num_clients} clients cannot be split evenly over {size} devices; "
                         f"use a multiple of {size} clients or fewer devices")


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


_SPLIT: list = []   # the meshes of the open split_clients blocks, innermost last


@contextlib.contextmanager
def split_clients(mesh: Mesh | None):
    """Within the block, a walk over N clients in chunks of c (``core.clients``: a chunked
    ``map_clients``, ``stream_clients``, ``map_client_data``, ``map_client_train_test``)
    with N a multiple of the mesh's size D runs under ``shard_map``: each device walks its
    own N / D clients (chunks of c), reading its block of the data; per-group sums are
    added over the devices (``psum``). Results equal one device's up to float summation
    order. A program takes the mesh when it is traced: JAX caches a jitted function's trace
    by the function, so one traced outside the block keeps its one-device walk inside it
    (and the reverse); trace a new function object. ``mesh=None`` turns splitting off
    inside the block (a walk inside a split walk)."""
    _SPLIT.append(mesh)
    try:
        yield mesh
    finally:
        _SPLIT.pop()


def active_mesh() -> Mesh | None:
    """The mesh of the innermost ``split_clients`` block, when it has several devices."""
    mesh = _SPLIT[-1] if _SPLIT else None
    return mesh if mesh is not None and mesh.devices.size > 1 else None


def data_specs(data):
    """``data`` with every array replaced by its ``shard_map`` spec: P("clients") for the
    per-client fields (the class's ``PER_CLIENT``), P() (replicated) for the rest."""
    per = set(getattr(data, "PER_CLIENT", PER_CLIENT_DATA))
    fields = [f.name for f in dataclasses.fields(data) if f.metadata.get("pytree_node", True)]
    spec = lambda name: PartitionSpec(AXIS) if name in per else PartitionSpec()
    return data.replace(**{k: jax.tree.map(lambda _, k=k: spec(k), getattr(data, k))
                           for k in fields})


PER_CLIENT_DATA = ("x", "y", "count", "x_test", "y_test", "count_test", "cluster", "point_cluster")
SHARED_DATA = ("true_params", "pool_x", "pool_y")


def place_for_split(data, mesh: Mesh):
    """``data`` placed once on the mesh of a split walk (``split_clients``): split as
    ``shard_clients`` does when N is a multiple of the mesh's size, else replicated. Left
    uncommitted, the data would be copied onto the mesh at every call of a compiled chunk."""
    if data.num_clients % mesh.devices.size == 0:
        return shard_clients(data, mesh)
    return jax.device_put(data, replicated(mesh))


def shard_clients(data, mesh: Mesh):
    """``data`` (``FederatedData``, or any pytree dataclass of client data such as views over
    a shared pool) with every per-client array split on its leading axis over the mesh and
    everything else replicated. N must be a multiple of the number of devices.

    Per-client: the fields in ``PER_CLIENT_DATA`` and any other array field with leading
    axis N (per-client indices, transform ids). Replicated: ``SHARED_DATA`` (ground truth, a
    shared example pool) and every other array (transform tables); a table whose length
    happens to be N is split, a layout choice that does not change results."""
    n = data.num_clients
    check_divisible(n, mesh)
    split, whole = NamedSharding(mesh, PartitionSpec(AXIS)), replicated(mesh)
    changes = {}
    for name, value in vars(data).items():
        if value is None or isinstance(value, (str, int, float, bool)):
            continue
        if name in SHARED_DATA:
            changes[name] = jax.tree.map(lambda a: jax.device_put(a, whole), value)
            continue
        per_client = name in PER_CLIENT_DATA or (value.ndim >= 1 and value.shape[0] == n)
        changes[name] = jax.device_put(value, split if per_client else whole)
    return data.replace(**changes)


def state_shardings(states, mesh: Mesh, num_clients: int, *, restarts: bool = True):
    """A pytree of ``NamedSharding`` matching ``states`` (arrays or ``jax.ShapeDtypeStruct``):
    leaves [R, N, ...] (``restarts=True``) or [N, ...] (``restarts=False``) get
    PartitionSpec(None, "clients") / ("clients",); every other leaf is replicated."""
    check_divisible(num_clients, mesh)
    axis = 1 if restarts else 0
    spec = PartitionSpec(*([None] * axis), AXIS)

    def one(leaf):
        shape = leaf.shape
        if len(shape) > axis and shape[axis] == num_clients:
            return NamedSharding(mesh, spec)
        return replicated(mesh)

    return jax.tree.map(one, states)


def shard_state(states, mesh: Mesh, num_clients: int, *, restarts: bool = True):
    """``states`` with every per-client leaf split over the mesh (see ``state_shardings``)."""
    return jax.device_put(states, state_shardings(states, mesh, num_clients, restarts=restarts))


def initialize_processes(coordinator_address: str, num_processes: int, process_id: int,
                         *, timeout_s: int = 300):
    """Joins a run of ``num_processes`` processes (one per host, or several on one host).
    Call before any other JAX call, with the same ``coordinator_address`` ("host:port" of
    process 0) everywhere. On CPU the cross-process collectives use gloo."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id,
                               initialization_timeout=timeout_s)


def to_host(tree):
    """``tree`` with every array as numpy; arrays that span other processes' devices are
    all-gathered first (every process must call this together)."""
    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable and not a.is_fully_replicated:
            from jax.experimental import multihost_utils
            return np.asarray(multihost_utils.process_allgather(a, tiled=True))
        return np.asarray(a) if isinstance(a, jax.Array) else a
    return jax.tree.map(one, tree)
