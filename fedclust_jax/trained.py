"""A run's chosen restart, in hand: its models, the clients' assignment and per-client
metrics, and the model to apply them to new inputs.

    result = run_experiment(cfg, keep_state=True)     # or run_study(..., keep_state=True)
    trained = result["trained"]                       # a Trained (not JSON: not written)
    trained.predict(x, cluster=1)                     # cluster model 1 on x [n, *features]
    trained.predict(x, client=7)                      # the model client 7 is judged by
    trained.save("run.npz")                           # fedclust-jax run --save-state run.npz
    trained = load_trained("run.npz")
    data = trained.rebuild_data()                     # the run's own FederatedData

The saved file is an .npz archive read without pickle:
  ``meta``               uint8 bytes of a JSON object: "format" ("fedclust_jax.trained/1"),
                         "algorithm", "config" (the run's ``ExperimentConfig`` as a dict),
                         "data" ({"feature_shape", "num_classes", "task", "num_clients"}),
                         "parts" ({part: [leaf path, ...]} for the pytrees below), "metrics"
                         (the per-client metric names) and "dtypes" (each leaf's dtype name)
  ``<part>/<i>``         leaf i of a pytree part, in ``jax.tree`` order: cluster_params
                         [K, ...] (the cluster models), client_params [N, ...] (personal
                         models), model_state [K, ...] (BatchNorm statistics, with
                         cluster_params)
  ``assign``             int32[N], client i's cluster (-1 = none), where the algorithm has one
  ``point_assign``       int32[N, n_max], each point's cluster (point-clustering algorithms)
  ``metric/<name>``      float [N, ...], per-client test metrics (test_loss, test_acc, ...)
bfloat16 leaves are stored as float32 and cast back on load. The model is rebuilt from the
config (its registered builder, given the data's feature shape, classes and task), so a
plugin model must be registered before ``load_trained``; ``rebuild_data`` rebuilds the
run's data the same way (a plugin dataset registered first).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

FORMAT = "fedclust_jax.trained/1"
PARTS = ("cluster_params", "client_params", "model_state")
NOT_METRICS = set(PARTS) | {"assign", "point_assign"}


@dataclasses.dataclass(frozen=True)
class DataShape:
    """What a model builder reads of the data: feature shape, classes, task."""

    feature_shape: tuple
    num_classes: int
    task: str
    num_clients: int = 0
    point_cluster: Any = None


@dataclasses.dataclass
class Trained:
    """The chosen restart's end state (numpy arrays on the host).

    algorithm: the algorithm's label; config: the run's ``ExperimentConfig`` as a dict;
    model: the ``Model`` the parameters belong to; cluster_params: pytree [K, ...] or None;
    client_params: pytree [N, ...] (personal models) or None; model_state: [K, ...]
    BatchNorm statistics of the cluster models or None; assign: int32[N] or None;
    point_assign: int32[N, n_max] or None; metrics: {name: [N, ...]} per-client test
    metrics; state: the algorithm's whole state (in memory only, not saved)."""

    algorithm: str
    config: dict
    model: Any
    data: DataShape
    cluster_params: Any = None
    client_params: Any = None
    model_state: Any = None
    assign: np.ndarray | None = None
    point_assign: np.ndarray | None = None
    metrics: dict = dataclasses.field(default_factory=dict)
    state: Any = None

    @property
    def num_clusters(self) -> int:
        """K, the cluster models held (0 without cluster_params)."""
        leaves = jax.tree.leaves(self.cluster_params)
        return int(leaves[0].shape[0]) if leaves else 0

    def params(self, cluster: int | None = None, client: int | None = None):
        """One model's parameters: cluster model ``cluster``; or the model client ``client``
        is judged by (its personal model, else cluster ``assign[client]``); with neither,
        the only cluster model. ValueError (one line) when the choice does not exist."""
        pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)
        if client is not None:
            n = self.data.num_clients
            if not 0 <= client < n:
                raise ValueError(f"client {client} is not one of the run's {n} clients")
            if self.client_params is not None:
                return pick(self.client_params, client), None
            if self.assign is None or self.assign[client] < 0:
                raise ValueError(f"client {client} has no cluster model (assign = "
                                 f"{None if self.assign is None else int(self.assign[client])})")
            cluster = int(self.assign[client])
        k = self.num_clusters
        if k == 0:
            raise ValueError(f"{self.algorithm} holds no cluster models; pass client= for "
                             "a personal model")
        if cluster is None:
            if k != 1:
                raise ValueError(f"{self.algorithm} holds {k} cluster models; pass cluster= "
                                 f"(0..{k - 1}) or client=")
            cluster = 0
        if not 0 <= cluster < k:
            raise ValueError(f"cluster {cluster} is not one of the {k} cluster models")
        state = None if self.model_state is None else pick(self.model_state, cluster)
        return pick(self.cluster_params, cluster), state

    def rebuild_data(self, data_dir=None):
        """The run's data, rebuilt from its config: the dataset ``config["dataset"]`` with
        the parameters ``config["data"]``, from the key the runner gave it
        (``fedclust_jax.data_key(config["seed"])``, not ``jax.random.key(seed)``), stored
        in the run's dtype: a ``FederatedData`` with its padded arrays. ``predict`` on its
        test examples reproduces the run's per-client test metrics. ``data_dir``: where a
        dataset's files are now, when not where the run read them. A run given its data
        directly (``run_experiment(cfg, data=...)``) is not rebuilt by this. ValueError
        (one line) when the dataset is not registered (import or --plugin its file)."""
        from fedclust_jax.data.registry import DATASETS, build_dataset
        from fedclust_jax.loop import data_key
        cfg = self.config
        name, params = cfg.get("dataset"), dict(cfg.get("data") or {})
        if name not in DATASETS:
            raise ValueError(f"the saved run's dataset {name!r} is not registered; import or "
                             "--plugin the file that registers it before rebuilding its data")
        if data_dir is not None:
            params["data_dir"] = str(data_dir)
        data = build_dataset(name, data_key(cfg.get("seed", 0)), **params).materialize()
        dtype = cfg.get("dtype", "float32")
        return data if dtype == "float32" else data.astype(dtype)

    def predict(self, x, cluster: int | None = None, client: int | None = None):
        """The model's outputs on ``x`` [n, *feature_shape] (logits [n, C] for
        classification, [n] or [n, 1] for regression) with the parameters ``params``
        chooses; BatchNorm models use their running statistics."""
        params, state = self.params(cluster, client)
        x = jnp.asarray(x)
        if tuple(x.shape[1:]) != tuple(self.data.feature_shape):
            raise ValueError(f"x has shape {tuple(x.shape)}; the model takes [n, "
                             f"{', '.join(map(str, self.data.feature_shape))}]")
        if state is None:
            return self.model.apply(params, x)
        return self.model.apply_with_state(params, state, x, train=False)[0]

    def save(self, path: str) -> str:
        """Writes the documented .npz (atomically: a temporary file renamed); returns path."""
        arrays, parts, dtypes = {}, {}, {}
        for part in PARTS:
            tree = getattr(self, part)
            if tree is None:
                continue
            leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
            parts[part] = [_path_json(p) for p, _ in leaves]
            for i, (_, leaf) in enumerate(leaves):
                a = np.asarray(leaf)
                dtypes[f"{part}/{i}"] = a.dtype.name
                arrays[f"{part}/{i}"] = a.astype(np.float32) if a.dtype.name == "bfloat16" else a
        for name in ("assign", "point_assign"):
            if getattr(self, name) is not None:
                arrays[name] = np.asarray(getattr(self, name), np.int32)
        for name, v in self.metrics.items():
            arrays[f"metric/{name}"] = np.asarray(v)
        meta = {"format": FORMAT, "algorithm": self.algorithm, "config": self.config,
                "data": {"feature_shape": list(self.data.feature_shape),
                         "num_classes": self.data.num_classes, "task": self.data.task,
                         "num_clients": self.data.num_clients},
                "parts": parts, "metrics": sorted(self.metrics), "dtypes": dtypes}
        tmp = f"{path}.tmp-{os.getpid()}.npz"
        try:
            np.savez(tmp, meta=np.frombuffer(json.dumps(meta, default=str).encode(), np.uint8),
                     **arrays)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path


def from_evaluation(label: str, cfg: dict, model, data, evaluation: dict, state=None) -> Trained:
    """A ``Trained`` from the chosen restart's ``evaluate`` output (host arrays) and state."""
    ev = dict(evaluation)
    n = data.num_clients
    model_state = getattr(state, "model_state", None)
    params = ev.get("cluster_params")
    if model_state is not None and params is not None:      # one model's statistics: [1, ...]
        k = jax.tree.leaves(params)[0].shape[0]
        like = jax.tree.leaves(model_state)[0]
        if np.ndim(like) == 0 or like.shape[0] != k:
            model_state = jax.tree.map(lambda a: np.asarray(a)[None], model_state)
    metrics = {k: np.asarray(v) for k, v in ev.items()
               if k not in NOT_METRICS and hasattr(v, "shape") and np.ndim(v) >= 1
               and np.shape(v)[0] == n}
    shape = DataShape(tuple(data.feature_shape), int(data.num_classes), data.task, n)
    host = lambda t: None if t is None else jax.tree.map(np.asarray, t)
    return Trained(algorithm=label, config=cfg, model=model, data=shape,
                   cluster_params=host(params), client_params=host(ev.get("client_params")),
                   model_state=host(model_state),
                   assign=None if ev.get("assign") is None else np.asarray(ev["assign"], np.int32),
                   point_assign=(None if ev.get("point_assign") is None
                                 else np.asarray(ev["point_assign"], np.int32)),
                   metrics=metrics, state=state)


def is_trained_file(path: str) -> bool:
    """True when ``path`` is an .npz written by ``Trained.save`` (its header is read)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return json.loads(bytes(f["meta"]).decode()).get("format") == FORMAT
    except Exception:       # any unreadable or foreign file
        return False


def load_trained(path: str) -> Trained:
    """The ``Trained`` saved at ``path`` (its model rebuilt from the saved config);
    ValueError (one line) for a file that is not one."""
    import zipfile
    try:
        f = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"{path!r} does not exist; give a file written by --save-state") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        raise ValueError(f"{path!r} is not a saved fedclust_jax run (not an .npz archive)") from None
    with f:
        try:
            meta = json.loads(bytes(f["meta"]).decode())
            assert meta.get("format") == FORMAT
        except (KeyError, ValueError, AssertionError, UnicodeDecodeError):
            raise ValueError(f"{path!r} is not a saved fedclust_jax run (no {FORMAT} "
                             "header)") from None
        arrays = {k: f[k] for k in f.files if k != "meta"}
    cfg = meta["config"]
    d = meta["data"]
    shape = DataShape(tuple(d["feature_shape"]), int(d["num_classes"]), d["task"],
                      int(d.get("num_clients", 0)))
    model = _model(cfg, shape)
    cast = lambda key, a: jnp.asarray(a, meta["dtypes"].get(key, a.dtype.name))
    trees = {part: _tree(paths, [cast(f"{part}/{i}", arrays[f"{part}/{i}"])
                                 for i in range(len(paths))])
             for part, paths in meta["parts"].items()}
    return Trained(algorithm=meta["algorithm"], config=cfg, model=model, data=shape,
                   cluster_params=trees.get("cluster_params"),
                   client_params=trees.get("client_params"),
                   model_state=trees.get("model_state"),
                   assign=arrays.get("assign"), point_assign=arrays.get("point_assign"),
                   metrics={m: arrays[f"metric/{m}"] for m in meta["metrics"]})


def _model(cfg: dict, shape: DataShape):
    from fedclust_jax.models.base import with_dtype
    from fedclust_jax.models.registry import MODELS, build_model
    name = cfg.get("model")
    if name is not None and name not in MODELS:
        raise ValueError(f"the saved run's model {name!r} is not registered; import or "
                         "--plugin the file that registers it before loading")
    return with_dtype(build_model(name, shape, **(cfg.get("model_args") or {})),
                      cfg.get("dtype", "float32"))


def _path_json(path) -> list:
    """A key path as JSON: [["d", key] | ["s", index] | ["a", name], ...]."""
    out = []
    for k in path:
        if isinstance(k, jax.tree_util.DictKey):
            out.append(["d", k.key])
        elif isinstance(k, jax.tree_util.SequenceKey):
            out.append(["s", k.idx])
        else:
            out.append(["a", str(getattr(k, "name", k))])
    return out


def _tree(paths: list, leaves: list):
    """Nested dicts and lists from the saved key paths (a sequence index makes a list, an
    attribute a dict key: the models' params are pure nested dicts)."""
    if len(paths) == 1 and not paths[0]:
        return leaves[0]
    root: dict = {}
    sequences = set()                       # ids of the dicts that stand for lists
    for path, leaf in zip(paths, leaves):
        node = root
        for depth, (kind, key) in enumerate(path):
            if kind == "s":
                sequences.add(id(node))
            if depth == len(path) - 1:
                node[key] = leaf
            else:
                node = node.setdefault(key, {})

    def build(node):
        if not isinstance(node, dict):
            return node
        out = {k: build(v) for k, v in node.items()}
        return [out[i] for i in sorted(out)] if id(node) in sequences else out
    return build(root)
