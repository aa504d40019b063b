"""UIFCA ([T] chapter 4, Algorithms 3-5): clustering points with K generative models (flows).

Every client holds points of several clusters: x [N, n_max, *shape], count [N]. State:
K flows stacked [K, ...] and the flow of every point, assign int32[N, n_max] (-1 on
padding). One ``round`` is one cluster round:
  learn   (Alg. 4): for each of the K flows, tau (``comm_rounds``) FedAvg rounds; in each,
          every client runs M (``local_steps``) steps (Alg. 5, batches of N
          (``batch_size``) of its points currently assigned to that flow) from the
          broadcast flow, and the server averages the K client copies weighted by
          |S_{i,k}| / |S_{*,k}| (a flow with no points anywhere keeps its params);
  assign  (Alg. 3): every point goes to the flow of lowest negative log-likelihood
          (ties to the lowest index; NaN counts as +inf).
Every client updates all K flows in every communication round (vmap over clients x flows).

Initialisation ([T] 4.3): one random flow copied K times, each copy plus N(0, init_noise^2)
per parameter. Initial assignment ``init_assign``: "models" (default: argmin-NLL under the
initial flows), "random" (i.i.d. uniform labels, [T] 4.2), "kfed" (k-FED's assignment,
``core.kmeans.kfed`` with its defaults: k-FED + UIFCA) or "oracle" (the true point
clusters ``data.point_cluster``: an oracle start, e.g. [T] Table 4.2's flows trained on
their labelled digits); ``init(..., assign=)`` takes any given assignment.

Where [T] contradicts itself (both offered, prose by default):
- ``model_init``: "warm" (prose: the clients run FedAvg "with model theta_k^(t) ... using
  the received model parameters") or "reinit" (Alg. 4 line 3, "Initialize theta^0
  randomly": a fresh noisy-copy draw each cluster round).
- ``assign_with``: "new" (prose: the learned flows are broadcast and the round "ends up
  with" re-assignment) or "previous" (Alg. 3 as printed assigns with theta^(t) although
  it has just learned theta^(t+1): a one-round lag). Alg. 4's sum over "m" clients is read
  as the n clients.

Batches (Alg. 5 random_subset): per communication round each (client, flow) pair draws a
random order of its member points and its M steps walk through it N at a time (distinct
points within a batch); a pair with fewer than N members uses all of them every step.
Loss: mean NLL over the batch (F_theta(B) / N). Optimizer: "sgd" (Alg. 5) or "adam",
fresh state each local update (``core.optim``).

Evaluation is point-level: ``evaluate`` returns the assignment (the experiment runner
scores it against ``data.point_cluster``: purity, misclustering, ARI; per-round purity
curves with ``eval_every``) and ``objective``, the mean NLL of the points under their
flows (no labels; the runner keeps the restart with the lowest after the last round).
Runs go through the runner: ``fedclust-jax run --algorithm uifca --dataset uifca-gaussian
--eval-every 1``; the runner's rounds are the cluster rounds T.
"""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fedclust_jax.algorithms.base import Algorithm, ScoresClusters, check_chunk
from fedclust_jax.core.kmeans import kfed
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.optim import OPTIMIZERS, make_optimizer
from fedclust_jax.data.federated import example_mask
from fedclust_jax.models.flows import FlowModel, noisy_copies
from fedclust_jax.bounds import NonNegative, Positive, Size
from fedclust_jax.config_check import check_config

MODEL_INITS = ("warm", "reinit")
ASSIGN_WITH = ("new", "previous")
INIT_ASSIGNS = ("random", "models", "kfed", "oracle")


@dataclasses.dataclass(frozen=True)
class UIFCAConfig:
    """Defaults: [T]'s synthetic runs (T=20, tau=100, M=100); N, eta and the noise scale are
    unspecified in [T] (chosen here). num_clusters: number of flows K; cluster_rounds: T, the setting's
    cluster rounds (for reference: a run's rounds are the runner's ``rounds``);
    comm_rounds: tau, FedAvg rounds per cluster round; local_steps: M local steps per
    communication round; batch_size: N points per local step; lr: step size eta; optimizer: "sgd" | "adam"; init_noise: std of the noise on the K
    copies; init_assign: the first assignment of the points, "models" (argmin NLL under the
    initial flows), "random", "kfed" or "oracle"; model_init: each cluster round's start,
    "warm" (the last flows, the prose) or "reinit" (fresh noisy copies, Alg. 4);
    assign_with: "new" (the flows just learned, the prose) or "previous" (Alg. 3 as
    printed, a one-round lag); chunk: clients
    per vectorized chunk (None = vmap all); standardize: every step sees the points mapped
    to (x - mean) / std over all real points (``standardize_points``; one extra aggregation
    of sums and counts; not in [T]; for continuous data only, not for images fed to the
    logit of ``real_nvp``)."""

    num_clusters: Size = 4
    cluster_rounds: Size = 20
    comm_rounds: Size = 100
    local_steps: Size = 100
    batch_size: Size = 32
    lr: Positive = 1e-3
    optimizer: str = "sgd"
    init_noise: NonNegative = 0.01
    init_assign: str = "models"
    model_init: str = "warm"
    assign_with: str = "new"
    chunk: Size | typing.Literal["auto"] | None = "auto"
    standardize: bool = False

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lr", "init_noise")

    def __post_init__(self):
        check_config(self)
        for name, allowed in (("optimizer", OPTIMIZERS), ("init_assign", INIT_ASSIGNS),
                              ("model_init", MODEL_INITS), ("assign_with", ASSIGN_WITH)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        check_chunk(self.chunk)


@struct.dataclass
class UIFCAState:
    """params: K flows stacked [K, ...]; assign: int32[N, n_max] flow of every point (-1 on
    padding); round: int32 cluster rounds done."""

    params: object
    assign: jax.Array
    round: jax.Array


POINT_BLOCK = 512   # points scored at once per client: bounds a conv flow's im2col patches


def point_nll(flow: FlowModel, params, x: jax.Array, *, chunk=None) -> jax.Array:
    """[N, n_max, K] NLL of every point (x [N, n_max, ...]) under every flow (params [K, ...]).
    Each client's points are scored POINT_BLOCK at a time (``lax.map`` over blocks), so
    memory does not grow with n_max; the result does not depend on the block size."""
    def per_client(xi, params):     # params passed, not closed over (``map_clients``)
        def per_block(xb):
            return jax.vmap(lambda p: flow.nll(p, xb))(params).T

        n = xi.shape[0]
        if n <= POINT_BLOCK:
            return per_block(xi)
        blocks = -(-n // POINT_BLOCK)
        pad = jnp.zeros((blocks * POINT_BLOCK - n,) + xi.shape[1:], xi.dtype)
        xb = jnp.concatenate([xi, pad]).reshape((blocks, POINT_BLOCK) + xi.shape[1:])
        return jax.lax.map(per_block, xb).reshape(blocks * POINT_BLOCK, -1)[:n]
    return map_clients(per_client, x, chunk=chunk, shared=params)


def assign_points(flow: FlowModel, params, x, count, *, chunk=None) -> jax.Array:
    """int32[N, n_max]: argmin_k NLL per point, -1 on padding (NaN counts as +inf)."""
    nll = point_nll(flow, params, x, chunk=chunk)
    nll = jnp.where(jnp.isnan(nll), jnp.inf, nll)
    a = jnp.argmin(nll, axis=-1).astype(jnp.int32)
    return jnp.where(example_mask(count, x.shape[1]), a, -1)


def model_update(flow: FlowModel, cfg: UIFCAConfig, params, x, member, key):
    """Alg. 5 for one (client, flow): M steps from ``params`` on the points x[n_max, ...]
    with member bool[n_max] (this flow's subset S_{i,k})."""
    n_max, batch = x.shape[0], cfg.batch_size
    opt = make_optimizer(cfg.optimizer, cfg.lr)
    c = jnp.sum(member)
    k_order, k_steps = jax.random.split(key)
    order = jnp.argsort(jnp.where(member, jax.random.uniform(k_order, (n_max,)), 2.0))
    full = c >= batch
    slots = jnp.arange(batch)

    def step(carry, j):
        p, state = carry
        pos = jnp.where(full, (j * batch + slots) % jnp.maximum(c, 1), slots % n_max)
        weight = jnp.where(full, 1.0, (slots < c).astype(jnp.float32))
        idx = order[pos]
        grads = jax.grad(flow.train_nll)(p, x[idx], weight, jax.random.fold_in(k_steps, j))
        updates, state = opt.update(grads, state, p)
        return (optax.apply_updates(p, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(cfg.local_steps))
    return params


def learn_cluster_models(flow: FlowModel, cfg: UIFCAConfig, params, x, assign, key):
    """Alg. 4 for all K flows at once: tau FedAvg rounds, size-weighted averaging.
    params [K, ...]; x [N, n_max, ...]; assign int32[N, n_max] -> params [K, ...]."""
    k = cfg.num_clusters
    member = assign[:, None, :] == jnp.arange(k)[None, :, None]          # [N, K, n_max]
    sizes = member.sum(-1).astype(jnp.float32)                           # [N, K] |S_{i,k}|
    total = sizes.sum(0)                                                 # [K]   |S_{*,k}|
    share = sizes / jnp.maximum(total, 1.0)
    clients = jnp.arange(x.shape[0])

    def comm_round(params, key_l):
        def per_client(xi, mi, i, shared):    # the round's models and key passed, not closed
            params, key_l = shared            # over (``map_clients``: split walks)
            key_i = jax.random.fold_in(key_l, i)
            keys = jax.vmap(lambda kk: jax.random.fold_in(key_i, kk))(jnp.arange(k))
            return jax.vmap(lambda p, m, kk: model_update(flow, cfg, p, xi, m, kk))(
                params, mi, keys)

        local = map_clients(per_client, x, member, clients, chunk=cfg.chunk,
                            shared=(params, key_l))                          # [N, K, ...]

        def average(loc, old):
            w = share.reshape(share.shape + (1,) * (loc.ndim - 2))
            new = jnp.sum(w * loc, axis=0)
            keep = (total > 0).reshape((k,) + (1,) * (old.ndim - 1))
            return jnp.where(keep, new, old)

        return jax.tree.map(average, local, params), None

    params, _ = jax.lax.scan(comm_round, params, jax.random.split(key, cfg.comm_rounds))
    return params


class UIFCA(ScoresClusters, Algorithm):
    """UIFCA: K flows cluster every client's points (--model affine-flow | real-nvp; point datasets).

    UIFCA over a ``FlowModel``; pure methods init / round / evaluate / objective."""

    name = "uifca"
    clusters_points = True

    def __init__(self, flow: FlowModel, cfg: UIFCAConfig = UIFCAConfig()):
        if not isinstance(flow, FlowModel):
            raise ValueError(f"UIFCA needs a flow model (--model affine-flow for vector "
                             f"points, real-nvp for images), got {type(flow).__name__}")
        self.flow, self.cfg = flow, cfg
        self.model = flow   # UIFCA(alg.model, cfg) rebuilds it (``hparams.rebuild``)

    def check_data(self, data):
        if tuple(data.feature_shape) != tuple(self.flow.shape) and \
                int(np.prod(data.feature_shape)) != int(np.prod(self.flow.shape)):
            raise ValueError(f"flow {self.flow.name} expects points of shape {self.flow.shape}, "
                             f"data has {data.feature_shape}")

    def points(self, data):
        """The data every step sees: ``standardize_points(data)`` when cfg.standardize."""
        return standardize_points(data) if self.cfg.standardize else data

    def init_params(self, key):
        k_base, k_noise = jax.random.split(key)
        return noisy_copies(self.flow.init(k_base), k_noise, self.cfg.num_clusters,
                            self.cfg.init_noise)

    def init(self, key, data, assign=None) -> UIFCAState:
        """Noisy-copy flows and the initial assignment (``assign`` int[N, n_max] overrides
        cfg.init_assign)."""
        self.check_data(data)
        data = self.points(data)
        k_params, k_assign = jax.random.split(key)
        params = self.init_params(k_params)
        mask = example_mask(data.count, data.x.shape[1])
        if assign is not None:
            assign = jnp.asarray(assign, jnp.int32)
            if assign.shape != mask.shape:
                raise ValueError(f"initial assignment must have shape {mask.shape}, "
                                 f"got {assign.shape}")
        elif self.cfg.init_assign == "random":
            assign = jax.random.randint(k_assign, mask.shape, 0, self.cfg.num_clusters)
        elif self.cfg.init_assign == "kfed":
            assign = kfed(k_assign, data.x, data.count, self.cfg.num_clusters,
                          chunk=self.cfg.chunk).assign
        elif self.cfg.init_assign == "oracle":
            if data.point_cluster is None:
                raise ValueError("init_assign='oracle' needs data with true point clusters "
                                 "(point_cluster); use another init_assign")
            assign = data.point_cluster
        else:
            assign = assign_points(self.flow, params, data.x, data.count, chunk=self.cfg.chunk)
        assign = jnp.where(mask, assign, -1).astype(jnp.int32)
        return UIFCAState(params=params, assign=assign, round=jnp.zeros((), jnp.int32))

    def round(self, state: UIFCAState, key, data):
        """One cluster round (learn, then assign) -> (state, metrics): objective (mean NLL)
        and cluster_sizes int32[K] (points per flow)."""
        data = self.points(data)
        k_init, k_learn = jax.random.split(key)
        start = state.params if self.cfg.model_init == "warm" else self.init_params(k_init)
        params = learn_cluster_models(self.flow, self.cfg, start, data.x, state.assign, k_learn)
        scorer = params if self.cfg.assign_with == "new" else state.params
        assign = assign_points(self.flow, scorer, data.x, data.count, chunk=self.cfg.chunk)
        sizes = jnp.sum(assign[..., None] == jnp.arange(self.cfg.num_clusters), axis=(0, 1))
        new = UIFCAState(params=params, assign=assign, round=state.round + 1)
        return new, dict(cluster_sizes=sizes, objective=self._objective(new, data))

    def objective(self, state: UIFCAState, data):
        """Mean over points of the assigned flow's NLL (the global objective summed over
        clusters and divided by m)."""
        return self._objective(state, self.points(data))

    def _objective(self, state, data):
        nll = point_nll(self.flow, state.params, data.x, chunk=self.cfg.chunk)
        safe = jnp.clip(state.assign, 0, self.cfg.num_clusters - 1)
        per = jnp.take_along_axis(nll, safe[..., None], -1)[..., 0]
        valid = state.assign >= 0
        return jnp.sum(jnp.where(valid, per, 0.0)) / jnp.maximum(valid.sum(), 1)

    def evaluate(self, state: UIFCAState, data) -> dict:
        """point_assign int32[N, n_max] (-1 on padding) and objective; jit-able (the runner
        scores point_assign against data.point_cluster)."""
        return dict(point_assign=state.assign, objective=self.objective(state, data))


def standardize_points(data):
    """``data`` with x -> (x - mean) / std, mean [*feature] and scalar std over all real
    points (a federated mean: clients send sums, sums of squares and counts); padding is
    set to 0. All flows then see the same rescaled points, so assignments and purity keep
    their meaning; the noisy-copy initial split is then less lopsided."""
    mask = example_mask(data.count, data.x.shape[1])
    w = mask.reshape(mask.shape + (1,) * (data.x.ndim - 2)).astype(data.x.dtype)
    total = jnp.maximum(jnp.sum(mask), 1)
    mean = jnp.sum(data.x * w, axis=(0, 1)) / total
    var = jnp.sum(((data.x - mean) * w) ** 2) / (total * mean.size)
    return data.replace(x=jnp.where(w > 0, (data.x - mean) / jnp.sqrt(jnp.maximum(var, 1e-12)),
                                    0.0))
