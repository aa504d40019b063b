"""ClusterGAN + FedAvg ([T] Table 4.3's baseline): one ClusterGAN trained by FedAvg, every
point clustered by its encoder.

ClusterGAN (Mukherjee, Asnani, Lin, Kannan, AAAI 2019): latent z = (z_n, z_c) with
z_n ~ N(0, sigma^2 I_{noise_dim}) (sigma = 0.1, noise_dim = 30 for MNIST) and z_c one-hot
over K clusters drawn uniformly; a generator G, a WGAN critic D and an encoder
E(x) = (E_n(x), E_c(x)) (``fedclust_jax.models.clustergan``). Losses over a batch of B
real points x and B latents z (WGAN with gradient penalty, as the paper and its code):

  critic:           mean D(G(z)) - mean D(x) + lambda mean_j (||grad D(x_hat_j)|| - 1)^2,
                    x_hat = eps x + (1 - eps) G(z), eps ~ U[0, 1], lambda = 10;
  generator+encoder: -mean D(G(z)) + beta_n mean_j ||z_n - E_n(G(z))||^2
                    + beta_c mean_j CE(z_c, E_c(G(z))), beta_n = beta_c = 10.

The authors' code writes D with the opposite sign (critic loss mean D(x) - mean D(G(z)));
the two are the same up to D -> -D. The generator and the encoder are updated together on
the second loss, the critic on the first, ``critic_steps`` = 5 critic updates before each
generator update (as the code). Where the paper and the code differ, the paper is the
default and the code an option: ``noise_loss="sum"`` is the paper's squared norm
||z_n - E_n||^2, ``"mean"`` the code's mean over the noise_dim coordinates (beta_n / 30
in effect); ``gp_mix="per_sample"`` draws one eps per point (WGAN-GP, Gulrajani et al.),
``"per_batch"`` one eps per batch (the code). The gradient norm is
sqrt(sum g^2 + 1e-12) (finite gradient at g = 0).

Federated training (FedAvg, full participation): every communication round the server
broadcasts (G, D, E); every client runs ``local_steps`` = M generator updates (each with
its ``critic_steps`` critic updates) on its own points, then the server averages the
client copies of all three networks weighted by point counts, count_i / sum_j count_j.
Real batches are B indices drawn uniformly with replacement below ``count[i]`` (padding
is never read; the code walks epochs without replacement); the latents are the client's
own draws. Optimizer: ``"sgd"`` with
lr 5e-3 ([T]: "SGD optimizer with learning rate 5e-3 for local batch updates") or
``"adam"`` (the authors' code: Adam, beta1 0.5, beta2 0.9, lr 1e-4 there), its state
fresh at every local update (not averaged). Clients are a vmapped leading axis
(``map_clients``), the round one jitted function; client i's key is fold_in(round_key, i).

Clustering: a point goes to argmax_k E_c(x)_k (ties to the lowest index), -1 on padding;
the score is purity against the true point clusters. The authors' code instead runs
k-means on the whole encoder output (E_n, softmax E_c) centrally; argmax needs no
server-side access to the points' latents.

Unspecified in [T] and chosen here: one "local batch update" is one generator update with
its critic updates; M = 100 local updates per communication round and 800 communication
rounds (UIFCA's T tau = 20 x 40 with M = 100: the same number of communication rounds and
local updates as UIFCA gets in Table 4.3); B = 64 (the code's default batch).
Runs go through the experiment runner (``fedclust-jax run --algorithm clustergan`` on a
point dataset of images; the networks are built from the config and the data's image
shape, ``width`` and ``fc_width`` setting their size); the runner's rounds are the
communication rounds. ``evaluate`` returns the point assignment, which the runner scores
against ``data.point_cluster`` (purity curves with ``eval_every``). ClusterGAN has no label-free training objective to pick
among restarts: ``objective`` is NaN and the runner keeps the first restart.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from fedclust_jax.algorithms.base import (Algorithm, check_chunk)
from fedclust_jax.core.aggregate import global_mean
from fedclust_jax.core.clients import map_clients
from fedclust_jax.core.optim import OPTIMIZERS, make_optimizer
from fedclust_jax.data.federated import example_mask
from fedclust_jax.models.clustergan import ClusterGANNets, clustergan_nets
from fedclust_jax.bounds import Bounds, NonNegative, Positive, Size
from fedclust_jax.config_check import check_config

NOISE_LOSSES = ("sum", "mean")
GP_MIXES = ("per_sample", "per_batch")


@dataclasses.dataclass(frozen=True)
class ClusterGANConfig:
    """Defaults: the paper's MNIST ClusterGAN, [T]'s SGD lr 5e-3, and the round counts of the
    module docstring. num_clusters: K (>= 2; the one-hot z_c); noise_dim: dim of z_n;
    noise_std: sigma, the standard deviation of z_n; beta_n, beta_c: weights of the z_n and
    z_c recovery losses; gp_weight: lambda, the weight of the critic's gradient penalty;
    critic_steps: critic updates per generator update; comm_rounds: the
    setting's FedAvg rounds (for reference: a run's rounds are the runner's ``rounds``);
    local_steps: M generator updates per client per round; batch_size: B points per step;
    lr: step size;
    optimizer: "sgd" | "adam"; noise_loss: "sum" | "mean"; gp_mix: "per_sample" |
    "per_batch" (module docstring); chunk: clients per vectorized chunk (None = vmap all);
    eval_batch: points per encoder call when assigning; width, fc_width: network size when
    the runner builds the networks (``models.clustergan.clustergan_nets``)."""

    num_clusters: Annotated[int, Bounds(2)] = 4
    noise_dim: Size = 30
    noise_std: Positive = 0.1
    beta_n: NonNegative = 10.0
    beta_c: NonNegative = 10.0
    gp_weight: NonNegative = 10.0
    critic_steps: Size = 5
    comm_rounds: Size = 800
    local_steps: Size = 100
    batch_size: Size = 64
    lr: Positive = 5e-3
    optimizer: str = "sgd"
    noise_loss: str = "sum"
    gp_mix: str = "per_sample"
    chunk: Size | typing.Literal["auto"] | None = "auto"
    eval_batch: Size = 1024
    width: Size = 64
    fc_width: Size = 1024

    TRACED: typing.ClassVar[tuple[str, ...]] = ("noise_std", "beta_n", "beta_c", "gp_weight", "lr")

    def __post_init__(self):
        k = self.num_clusters
        if not isinstance(k, (int, np.integer)) or k < 2:
            raise ValueError(f"ClusterGAN needs K >= 2 clusters (an integer), got {k!r}")
        check_config(self)
        for name, allowed in (("optimizer", OPTIMIZERS), ("noise_loss", NOISE_LOSSES),
                              ("gp_mix", GP_MIXES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        check_chunk(self.chunk)


@struct.dataclass
class ClusterGANState:
    """params: {"generator", "critic", "encoder"} (the global networks); round: int32
    communication rounds done."""

    params: dict
    round: jax.Array


def sample_latent(key, n: int, cfg: ClusterGANConfig):
    """(z [n, noise_dim + K] = (z_n, one-hot z_c), c int32[n]): z_n ~ N(0, sigma^2 I),
    c uniform over the K clusters."""
    k_n, k_c = jax.random.split(key)
    c = jax.random.randint(k_c, (n,), 0, cfg.num_clusters)
    z_n = cfg.noise_std * jax.random.normal(k_n, (n, cfg.noise_dim))
    return jnp.concatenate([z_n, jax.nn.one_hot(c, cfg.num_clusters)], -1), c


def critic_loss(nets: ClusterGANNets, cfg: ClusterGANConfig, critic_params, x_real, x_fake,
                key):
    """WGAN-GP critic loss (scalar) on x_real, x_fake [B, s, s, C]."""
    d_real = nets.critic(critic_params, x_real)
    d_fake = nets.critic(critic_params, x_fake)
    shape = (x_real.shape[0],) + (1,) * (x_real.ndim - 1) if cfg.gp_mix == "per_sample" else ()
    eps = jax.random.uniform(key, shape)
    x_hat = eps * x_real + (1.0 - eps) * x_fake
    # the critic treats points independently, so the gradient of the sum is per point
    grad = jax.grad(lambda xh: jnp.sum(nets.critic(critic_params, xh)))(x_hat)
    norm = jnp.sqrt(jnp.sum(jnp.square(grad), axis=tuple(range(1, grad.ndim))) + 1e-12)
    return jnp.mean(d_fake) - jnp.mean(d_real) + cfg.gp_weight * jnp.mean(jnp.square(norm - 1.0))


def generator_loss(nets: ClusterGANNets, cfg: ClusterGANConfig, gen_enc, critic_params, z, c):
    """Generator + encoder loss (scalar); gen_enc = {"generator", "encoder"} params,
    z [B, noise_dim + K], c int[B] (z's cluster)."""
    x = nets.generate(gen_enc["generator"], z)
    z_n_hat, logits = nets.encode(gen_enc["encoder"], x)
    sq = jnp.square(z[:, :cfg.noise_dim] - z_n_hat)
    noise = jnp.mean(jnp.sum(sq, -1)) if cfg.noise_loss == "sum" else jnp.mean(sq)
    ce = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, c))
    return -jnp.mean(nets.critic(critic_params, x)) + cfg.beta_n * noise + cfg.beta_c * ce


def _optimizer(cfg: ClusterGANConfig):
    """SGD, or Adam with the authors' code's beta1 0.5, beta2 0.9."""
    return make_optimizer(cfg.optimizer, cfg.lr, b1=0.5, b2=0.9)


def local_update(nets: ClusterGANNets, cfg: ClusterGANConfig, params, x, count, key):
    """One client's M generator updates (each after ``critic_steps`` critic updates) from
    ``params`` on its points x [n_max, ...] (the first ``count`` real).

    Returns (params, losses [2]): the client's networks and its mean (critic, generator)
    loss over the M updates."""
    opt, batch, shape = _optimizer(cfg), cfg.batch_size, nets.shape
    gen_enc = dict(generator=params["generator"], encoder=params["encoder"])
    high = jnp.maximum(count, 1)

    def critic_step(carry, k):
        crit, state, gen = carry
        k_idx, k_z, k_eps = jax.random.split(k, 3)
        x_real = x[jax.random.randint(k_idx, (batch,), 0, high)].reshape((batch,) + shape)
        x_fake = jax.lax.stop_gradient(nets.generate(gen, sample_latent(k_z, batch, cfg)[0]))
        loss, grads = jax.value_and_grad(
            lambda p: critic_loss(nets, cfg, p, x_real, x_fake, k_eps))(crit)
        updates, state = opt.update(grads, state, crit)
        return (optax.apply_updates(crit, updates), state, gen), loss

    def generator_step(carry, k):
        crit, crit_state, ge, ge_state = carry
        k_crit, k_z = jax.random.split(k)
        (crit, crit_state, _), d_losses = jax.lax.scan(
            critic_step, (crit, crit_state, ge["generator"]),
            jax.random.split(k_crit, cfg.critic_steps))
        z, c = sample_latent(k_z, batch, cfg)
        loss, grads = jax.value_and_grad(
            lambda p: generator_loss(nets, cfg, p, crit, z, c))(ge)
        updates, ge_state = opt.update(grads, ge_state, ge)
        ge = optax.apply_updates(ge, updates)
        return (crit, crit_state, ge, ge_state), jnp.stack([d_losses[-1], loss])

    carry = (params["critic"], opt.init(params["critic"]), gen_enc, opt.init(gen_enc))
    (crit, _, ge, _), losses = jax.lax.scan(generator_step, carry,
                                            jax.random.split(key, cfg.local_steps))
    new = dict(generator=ge["generator"], critic=crit, encoder=ge["encoder"])
    return new, jnp.mean(losses, axis=0)


def fedavg(local, count, old):
    """Count-weighted average (``core.aggregate.global_mean``) of the client copies local
    [N, ...] with weights count [N]; ``old`` is kept if no client has points."""
    new = global_mean(local, weights=count)
    return jax.tree.map(lambda n, prev: jnp.where(jnp.sum(count) > 0, n, prev), new, old)


def assign_points(nets: ClusterGANNets, encoder_params, x, count, *, eval_batch: int = 1024):
    """int32[N, n_max]: argmax_k of the encoder's cluster logits for every point of
    x [N, n_max, ...], -1 on padding; ``eval_batch`` points per encoder call."""
    n, n_max = x.shape[:2]
    flat = x.reshape((n * n_max,) + nets.shape)
    logits = jax.lax.map(lambda xi: nets.encode(encoder_params, xi[None])[1][0], flat,
                         batch_size=min(eval_batch, n * n_max))
    a = jnp.argmax(logits, axis=-1).astype(jnp.int32).reshape(n, n_max)
    return jnp.where(example_mask(count, n_max), a, -1)


class ClusterGAN(Algorithm):
    """ClusterGAN + FedAvg: points clustered by the encoder (point datasets of images).

    Over ``ClusterGANNets``; pure methods init / round / assign."""

    name = "clustergan"
    clusters_points = True

    def __init__(self, nets: ClusterGANNets, cfg: ClusterGANConfig = ClusterGANConfig()):
        if nets.num_clusters != cfg.num_clusters or nets.noise_dim != cfg.noise_dim:
            raise ValueError(f"networks {nets.name} have K = {nets.num_clusters}, noise_dim = "
                             f"{nets.noise_dim}; the config has K = {cfg.num_clusters}, "
                             f"noise_dim = {cfg.noise_dim}")
        self.nets, self.cfg = nets, cfg
        self.model = nets   # ClusterGAN(alg.model, cfg) rebuilds it (``hparams.rebuild``)

    def check_data(self, data):
        if int(np.prod(data.feature_shape)) != int(np.prod(self.nets.shape)):
            raise ValueError(f"networks {self.nets.name} expect points of shape "
                             f"{self.nets.shape}, data has {tuple(data.feature_shape)}")

    def init(self, key, data) -> ClusterGANState:
        """Random global networks."""
        self.check_data(data)
        return ClusterGANState(params=self.nets.init(key), round=jnp.zeros((), jnp.int32))

    def round(self, state: ClusterGANState, key, data):
        """One FedAvg communication round -> (state, metrics); metrics: count-weighted
        mean over clients of their mean critic and generator losses."""
        def per_client(xi, ci, i):
            return local_update(self.nets, self.cfg, state.params, xi, ci,
                                jax.random.fold_in(key, i))

        ids = jnp.arange(data.x.shape[0])
        local, losses = map_clients(per_client, data.x, data.count, ids, chunk=self.cfg.chunk)
        params = fedavg(local, data.count, state.params)
        mean_losses = fedavg(losses, data.count, jnp.zeros(2))
        new = ClusterGANState(params=params, round=state.round + 1)
        return new, dict(critic_loss=mean_losses[0], generator_loss=mean_losses[1])

    def assign(self, state: ClusterGANState, data) -> jax.Array:
        """int32[N, n_max] cluster of every point (encoder argmax), -1 on padding."""
        return assign_points(self.nets, state.params["encoder"], data.x, data.count,
                             eval_batch=self.cfg.eval_batch)

    def objective(self, state: ClusterGANState, data):
        """NaN: ClusterGAN has no label-free objective to compare restarts by."""
        return jnp.float32(jnp.nan)

    def evaluate(self, state: ClusterGANState, data) -> dict:
        """point_assign int32[N, n_max] (encoder argmax, -1 on padding); jit-able."""
        return dict(point_assign=self.assign(state, data))


def build(model, cfg: ClusterGANConfig, data) -> ClusterGAN:
    """The registry's builder: ClusterGAN with networks for ``data``'s images (feature
    shape (s, s) or (s, s, C)); ``model`` is not used."""
    shape = tuple(data.feature_shape)
    if len(shape) not in (2, 3) or shape[0] != shape[1]:
        raise ValueError(f"ClusterGAN needs square images (s, s) or (s, s, C) as points, the "
                         f"data have feature shape {shape}")
    nets = clustergan_nets(cfg.num_clusters, noise_dim=cfg.noise_dim, size=shape[0],
                           channels=shape[2] if len(shape) == 3 else 1, width=cfg.width,
                           fc_width=cfg.fc_width)
    return ClusterGAN(nets, cfg)
