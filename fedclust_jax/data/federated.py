"""`FederatedData`: every client's data as padded arrays with a leading client axis."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

TASKS = ("regression", "classification")
DTYPES = ("float32", "bfloat16")  # storage dtypes of float features (``astype``)


def check_dtype(dtype) -> str:
    """The name of ``dtype`` if it is one of DTYPES, else a ValueError saying which are."""
    try:
        name = jnp.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}")
    return name


@struct.dataclass
class FederatedData:
    """Padded per-client train and test data (a pytree of arrays).

    Shapes (N clients, n_max / n_test_max padded examples per client):
      x: [N, n_max, *feature_shape]; y: [N, n_max]; count: int32[N] real examples per client
      x_test: [N, n_test_max, ...]; y_test: [N, n_test_max]; count_test: int32[N]
      cluster: int32[N] true cluster of each client (-1 where unknown)
      point_cluster: int32[N, n_max] true cluster of each train point, or None
        (UIFCA-style data, where points rather than clients carry clusters)
      true_params: per-cluster ground-truth parameters with leading axis k, or None
        (synthetic regression: [k, d])
    Static metadata (not traced): task ("regression" | "classification"), num_classes.
    Entries past ``count[i]`` are padding and never enter a loss (see ``example_mask``).
    """

    x: jax.Array
    y: jax.Array
    count: jax.Array
    x_test: jax.Array
    y_test: jax.Array
    count_test: jax.Array
    cluster: jax.Array
    point_cluster: Any = None
    true_params: Any = None
    task: str = struct.field(pytree_node=False, default="classification")
    num_classes: int = struct.field(pytree_node=False, default=0)

    # Fields with a leading client axis N (to shard or gather); the rest is shared.
    PER_CLIENT = ("x", "y", "count", "x_test", "y_test", "count_test", "cluster",
                  "point_cluster")

    @property
    def num_clients(self) -> int:
        return int(self.count.shape[0])

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[2:])

    @property
    def n_max(self) -> int:
        """Train slots per client (x.shape[1]); read this rather than x.shape on views."""
        return int(self.y.shape[1])

    @property
    def n_test_max(self) -> int:
        return int(self.y_test.shape[1])

    @property
    def num_true_clusters(self) -> int:
        c = np.asarray(self.cluster)
        return int(c.max()) + 1 if (c >= 0).any() else 0

    def train_client(self, i):
        """(x [n_max, *feature_shape], y [n_max], count scalar) of client ``i`` (a traced
        int is fine); the one way per-client code reads a client's training data."""
        return self.x[i], self.y[i], self.count[i]

    def test_client(self, i):
        """(x [n_test_max, ...], y [n_test_max], count scalar) of client ``i``'s test split."""
        return self.x_test[i], self.y_test[i], self.count_test[i]

    def take(self, idx) -> "FederatedData":
        """The sub-population of clients ``idx`` (int array [M]), every per-client array gathered."""
        gather = lambda a: None if a is None else a[idx]
        return self.replace(
            x=self.x[idx], y=self.y[idx], count=self.count[idx],
            x_test=self.x_test[idx], y_test=self.y_test[idx], count_test=self.count_test[idx],
            cluster=self.cluster[idx], point_cluster=gather(self.point_cluster))

    @property
    def nbytes(self) -> int:
        """Bytes held by every array of the data."""
        return tree_nbytes(self)

    def astype(self, dtype) -> "FederatedData":
        """Float features (x, x_test) stored as ``dtype`` (e.g. "bfloat16"); labels, integer
        features (tokens) and regression targets unchanged."""
        dtype = check_dtype(dtype)
        cast = lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a
        return self.replace(x=cast(self.x), x_test=cast(self.x_test))

    def materialize(self) -> "FederatedData":
        """Itself (``FederatedViews.materialize`` gives the padded arrays of views)."""
        return self

    def summary(self) -> str:
        return summary_head(self)


def summary_head(data) -> str:
    """One line on a data set (``FederatedData`` or ``FederatedViews``): clients, task,
    features, training examples per client, true clusters ("unknown" when the clients carry
    no cluster label, e.g. FEMNIST)."""
    c = np.asarray(data.count)
    k = data.num_true_clusters
    return (f"{data.num_clients} clients, {data.task}, features {data.feature_shape}, "
            f"train examples per client {c.min()}..{c.max()} (total {c.sum()}), "
            f"true clusters {k if k else 'unknown'}")


def tree_nbytes(tree) -> int:
    """Bytes of every array leaf of ``tree`` (arrays or ShapeDtypeStructs)."""
    return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
               for a in jax.tree.leaves(tree))


def example_mask(count: jax.Array, n_max: int) -> jax.Array:
    """bool[..., n_max]: True for real examples, False for padding; ``count`` has any shape."""
    return jnp.arange(n_max) < jnp.asarray(count)[..., None]


def from_client_lists(xs, ys, xs_test, ys_test, cluster=None, *, task: str,
                      num_classes: int = 0, point_clusters=None, true_params=None,
                      dtype=np.float32) -> FederatedData:
    """Pads ragged per-client numpy arrays into a ``FederatedData``.

    xs, xs_test: lists (length N) of arrays [n_i, *feature_shape]; ys, ys_test: lists of [n_i].
    cluster: int[N] or None (-1 for all). Clients with no test data get count_test 0.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    n = len(xs)
    if not (len(ys) == len(xs_test) == len(ys_test) == n):
        raise ValueError("xs, ys, xs_test and ys_test must all have one entry per client")
    y_dtype = np.float32 if task == "regression" else np.int32

    def pad(arrs, ydt, fshape=None, fill=0):
        counts = np.array([len(a) for a in arrs], np.int32)
        width = max(1, int(counts.max()) if n else 1)
        shape = fshape if fshape is not None else np.asarray(arrs[0]).shape[1:]
        out = np.full((n, width, *shape), fill, ydt)
        for i, a in enumerate(arrs):
            if len(a):
                out[i, :len(a)] = a
        return out, counts

    x, count = pad(xs, dtype)
    fshape = x.shape[2:]
    y, _ = pad(ys, y_dtype, ())
    x_test, count_test = pad(xs_test, dtype, fshape)
    y_test, _ = pad(ys_test, y_dtype, ())
    pc = None
    if point_clusters is not None:
        pc, _ = pad(point_clusters, np.int32, (), fill=-1)  # padding belongs to no cluster
    cl = np.full(n, -1, np.int32) if cluster is None else np.asarray(cluster, np.int32)
    return FederatedData(
        x=jnp.asarray(x), y=jnp.asarray(y), count=jnp.asarray(count),
        x_test=jnp.asarray(x_test), y_test=jnp.asarray(y_test), count_test=jnp.asarray(count_test),
        cluster=jnp.asarray(cl), point_cluster=None if pc is None else jnp.asarray(pc),
        true_params=true_params, task=task, num_classes=num_classes)
