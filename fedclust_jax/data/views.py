"""`FederatedViews`: clients as index arrays into one shared example pool, transformed on read.

A recipe that transforms one source set (rotations, inversion, label maps) stores the source
once, as it came (uint8 for MNIST and CIFAR-10), plus per client int32 indices and a transform
id; a client's examples are gathered, scaled and transformed inside ``jit`` when read.

Shapes (N clients, P pool examples, T transforms, n_max / n_test_max slots per client):
  pool_x: [P, *feature_shape] uint8 (with ``values``) or float; pool_y: [P] (int32 labels)
  index: int32[N, n_max], index_test: int32[N, n_test_max]: rows of the pool (train and
    test examples both live in the one pool; padding slots point at row 0, masked by count)
  count, count_test: int32[N]; cluster: int32[N]; transform: int32[N] row of the table
  values: float32[256] pool byte -> feature value (e.g. b / 255), or None for a float pool
  pixel_perm: int32[T, H * W] source pixel of each output pixel (rotation by k x 90 degrees)
  invert: bool[T], invert_top: float32[T]: feature -> invert_top - feature where invert
  label_map: int32[T, num_classes] label -> label (a permutation), or None (labels as stored)
Static: task, num_classes, dtype (the dtype reads return: "float32" or "bfloat16").

Reading client i: ``pool_x[index[i]]`` -> ``values[.]`` (float32) -> pixel permutation ->
inversion (float32) -> cast to ``dtype``; labels ``label_map[transform[i], pool_y[index[i]]]``.
Every step is an exact float32 operation or a gather, so a view reads bit-for-bit what the
materialised recipe stores (``tests/data/test_views.py``). The byte -> value step is a table
gather, not ``b / 255``: XLA rewrites that division as a multiplication by 1/255, which
differs from numpy's division in the last bit for some bytes. A read costs a gather and a
permutation more than a slice of materialised arrays, less than one MLP layer on the batch.

Memory: the pool (MNIST 70,000 x 784 bytes = 55 MB) once, plus per client
4 * (n_max + n_test_max) + 16 bytes (indices, count, count_test, cluster, transform):
IFCA rotated MNIST at 4,800 clients of n = n_test = 50 holds 55 MB + 2 MB, against
4,800 x 100 x 784 x 4 B = 1.5 GB materialised; 1M clients drawing 20 + 20 examples with
replacement hold 55 MB + 176 MB.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fedclust_jax.data.federated import FederatedData, check_dtype, summary_head, tree_nbytes
from fedclust_jax.data.transforms import ClusterTransform, pixel_permutation


@struct.dataclass
class FederatedViews:
    """Per-client views of a shared example pool (see the module doc for every shape).

    The same interface as ``FederatedData``: ``train_client(i)`` / ``test_client(i)`` read one
    client (gather + transform, cheap); ``x``, ``y``, ``x_test``, ``y_test`` are properties
    that materialise every client (correct, but a full copy: [N, n_max, *feature_shape]);
    ``take(idx)`` gathers only indices; ``materialize()`` returns the equal ``FederatedData``.
    """

    pool_x: jax.Array
    pool_y: jax.Array
    index: jax.Array
    count: jax.Array
    index_test: jax.Array
    count_test: jax.Array
    cluster: jax.Array
    transform: jax.Array
    pixel_perm: jax.Array
    invert: jax.Array
    invert_top: jax.Array
    values: Any = None
    label_map: Any = None
    point_cluster: Any = None
    true_params: Any = None
    task: str = struct.field(pytree_node=False, default="classification")
    num_classes: int = struct.field(pytree_node=False, default=0)
    dtype: str = struct.field(pytree_node=False, default="float32")

    # Fields with a leading client axis N (to shard or gather); the rest is shared.
    PER_CLIENT = ("index", "count", "index_test", "count_test", "cluster", "transform",
                  "point_cluster")

    # ------------------------------------------------------------ reading

    def _read_x(self, index, t):
        """index int32[n], t scalar -> features [n, *feature_shape] in ``dtype``."""
        raw = self.pool_x[index]
        x = self.values[raw] if self.values is not None else raw.astype(jnp.float32)
        n, fshape = x.shape[0], x.shape[1:]
        flat = x.reshape(n, self.pixel_perm.shape[1], -1)
        x = flat[:, self.pixel_perm[t]].reshape(n, *fshape)
        x = jnp.where(self.invert[t], self.invert_top[t] - x, x)
        return x.astype(self.dtype)

    def _read_y(self, index, t):
        y = self.pool_y[index]
        return y if self.label_map is None else self.label_map[t][y]

    def train_client(self, i):
        """(x [n_max, *feature_shape], y [n_max], count scalar) of client ``i`` (a traced int
        is fine): one gather of n_max pool rows, transformed."""
        t = self.transform[i]
        return self._read_x(self.index[i], t), self._read_y(self.index[i], t), self.count[i]

    def test_client(self, i):
        """(x [n_test_max, ...], y [n_test_max], count scalar) of client ``i``'s test split."""
        t = self.transform[i]
        return (self._read_x(self.index_test[i], t), self._read_y(self.index_test[i], t),
                self.count_test[i])

    @property
    def x(self):
        """[N, n_max, *feature_shape] every client's features (a materialised copy)."""
        return jax.vmap(self._read_x)(self.index, self.transform)

    @property
    def y(self):
        return jax.vmap(self._read_y)(self.index, self.transform)

    @property
    def x_test(self):
        return jax.vmap(self._read_x)(self.index_test, self.transform)

    @property
    def y_test(self):
        return jax.vmap(self._read_y)(self.index_test, self.transform)

    # ------------------------------------------------------------ the shared interface

    @property
    def num_clients(self) -> int:
        return int(self.count.shape[0])

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.pool_x.shape[1:])

    @property
    def n_max(self) -> int:
        """Train slots per client (x.shape[1], without materialising x)."""
        return int(self.index.shape[1])

    @property
    def n_test_max(self) -> int:
        return int(self.index_test.shape[1])

    @property
    def num_true_clusters(self) -> int:
        c = np.asarray(self.cluster)
        return int(c.max()) + 1 if (c >= 0).any() else 0

    @property
    def nbytes(self) -> int:
        """Bytes held by every array (the pool counted once)."""
        return tree_nbytes(self)

    def take(self, idx) -> "FederatedViews":
        """The sub-population of clients ``idx`` (int array [M]): only indices, counts and ids
        are gathered; the pool is shared."""
        gather = lambda a: None if a is None else a[idx]
        return self.replace(**{f: gather(getattr(self, f)) for f in self.PER_CLIENT})

    def astype(self, dtype) -> "FederatedViews":
        """Reads return ``dtype`` features ("float32" or "bfloat16"; conversion after the
        float32 transform). A uint8 pool stays uint8; a float pool is stored in ``dtype``."""
        name = check_dtype(dtype)
        pool = self.pool_x
        if self.values is None and jnp.issubdtype(pool.dtype, jnp.floating):
            pool = pool.astype(name)
        return self.replace(pool_x=pool, dtype=name)

    def materialize(self) -> FederatedData:
        """The equal padded ``FederatedData`` (every client's arrays copied out)."""
        return FederatedData(x=self.x, y=self.y, count=self.count, x_test=self.x_test,
                             y_test=self.y_test, count_test=self.count_test,
                             cluster=self.cluster, point_cluster=self.point_cluster,
                             true_params=self.true_params, task=self.task,
                             num_classes=self.num_classes)

    def summary(self) -> str:
        return (f"{summary_head(self)}; views of a pool of "
                f"{self.pool_x.shape[0]} {self.pool_x.dtype} examples, "
                f"{self.nbytes / 2**20:.1f} MiB")


def transform_tables(transforms: Sequence[ClusterTransform], feature_shape, num_classes: int):
    """(pixel_perm int32[T, H*W], invert bool[T], invert_top float32[T], label_map
    int32[T, num_classes] or None) for a list of ``ClusterTransform``. Features other than
    images [H, W, C] allow no rotation (one position, the identity)."""
    for t in transforms:
        if not isinstance(t, ClusterTransform):
            raise TypeError(f"views need transforms.ClusterTransform entries (rotation, "
                            f"inversion, label shift), got {t!r}; build with views=False")
    image = len(feature_shape) == 3
    if not image and any(t.rot % 4 for t in transforms):
        raise ValueError(f"rotations need image features [H, W, C], got {tuple(feature_shape)}")
    perm = np.stack([pixel_permutation(*feature_shape[:2], t.rot) if image else
                     np.zeros(1, np.int32) for t in transforms])
    inv = np.array([t.invert is not None for t in transforms])
    top = np.array([0.0 if t.invert is None else t.invert for t in transforms], np.float32)
    label_map = None
    if any(t.label_shift % t.num_classes for t in transforms):
        label_map = np.stack([(np.arange(num_classes) + t.label_shift) % t.num_classes
                              for t in transforms]).astype(np.int32)
    return perm, inv, top, label_map


def make_views(pool_x, pool_y, index, index_test, cluster, transform,
               transforms: Sequence[ClusterTransform], *, values=None, count=None,
               count_test=None, task: str = "classification",
               num_classes: int = 0) -> FederatedViews:
    """Builds ``FederatedViews`` from numpy arrays (shapes in the module doc).

    count / count_test default to full rows (index.shape[1] / index_test.shape[1]).
    Indices are checked against the pool; ``transform`` against the table.
    """
    pool_x, pool_y = np.asarray(pool_x), np.asarray(pool_y)
    index, index_test = np.asarray(index), np.asarray(index_test)
    n = index.shape[0]
    if pool_x.shape[0] != pool_y.shape[0]:
        raise ValueError(f"pool_x has {pool_x.shape[0]} examples but pool_y {pool_y.shape[0]}")
    for name, a in (("index", index), ("index_test", index_test)):
        if a.ndim != 2 or a.shape[0] != n:
            raise ValueError(f"{name} must be [N={n}, slots], got {a.shape}")
        if a.size and (a.min() < 0 or a.max() >= len(pool_x)):
            raise ValueError(f"{name} points outside the pool of {len(pool_x)} examples")
    transform = np.asarray(transform, np.int32)
    if transform.shape != (n,) or (n and (transform.min() < 0 or transform.max() >= len(transforms))):
        raise ValueError(f"transform must be int[{n}] in [0, {len(transforms)})")
    if values is not None:
        if pool_x.dtype != np.uint8:
            raise ValueError(f"a value table needs a uint8 pool, got {pool_x.dtype}")
        values = jnp.asarray(np.asarray(values, np.float32).reshape(256))
    perm, inv, top, label_map = transform_tables(transforms, pool_x.shape[1:], num_classes)
    full = lambda c, a: np.full(n, a.shape[1], np.int32) if c is None else np.asarray(c, np.int32)
    return FederatedViews(
        pool_x=jnp.asarray(pool_x), pool_y=jnp.asarray(pool_y),
        index=jnp.asarray(index, jnp.int32), count=jnp.asarray(full(count, index)),
        index_test=jnp.asarray(index_test, jnp.int32),
        count_test=jnp.asarray(full(count_test, index_test)),
        cluster=jnp.asarray(np.asarray(cluster, np.int32)), transform=jnp.asarray(transform),
        pixel_perm=jnp.asarray(perm), invert=jnp.asarray(inv), invert_top=jnp.asarray(top),
        values=values, label_map=None if label_map is None else jnp.asarray(label_map),
        task=task, num_classes=num_classes)
