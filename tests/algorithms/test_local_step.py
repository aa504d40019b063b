"""The local-step mechanism of ``core.train``: loss terms from the round's models and
per-client state, a custom optax update rule, through ``local_train``, ``cluster_pass``
(an IFCA variant with a proximal term) and Ditto's personal step, checked against gradient
descent written out by hand on a tiny linear regression; traced coefficients, bf16
storage and BatchNorm statistics. FedProx and SCAFFOLD (examples/): tests/test_examples.py."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from fedclust_jax.algorithms.ditto import personal_step
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.core.train import (LocalTraining, add_terms, linear_term, local_train,
                                     proximal_term)
from fedclust_jax.data.federated import FederatedData
from fedclust_jax.models.base import cast_floats
from fedclust_jax.models.linear import linear_regression
from fedclust_jax.models.resnet9 import from_nnx_stateful

COUNTS = (5, 3, 4, 5)
D = 3
MODEL = linear_regression(D, init="normal")


def tiny_regression():
    """4 clients, ragged counts, padding filled with junk that must not count."""
    rng = np.random.default_rng(0)
    n, n_max = len(COUNTS), max(COUNTS)
    x = rng.normal(size=(n, n_max, D)).astype(np.float32)
    theta = np.array([[1.0, -2.0, 0.5], [-1.0, 2.0, -0.5]], np.float32)
    cluster = np.array([0, 1, 0, 1], np.int32)
    y = np.einsum("nsd,nd->ns", x, theta[cluster]).astype(np.float32)
    real = np.arange(n_max)[None, :] < np.asarray(COUNTS)[:, None]
    x, y = np.where(real[..., None], x, 50.0), np.where(real, y, -50.0)
    count = jnp.asarray(COUNTS, jnp.int32)
    return FederatedData(x=jnp.asarray(x), y=jnp.asarray(y), count=count, x_test=jnp.asarray(x),
                         y_test=jnp.asarray(y), count_test=count, cluster=jnp.asarray(cluster),
                         task="regression")


DATA = tiny_regression()


def grad_by_hand(w, i):
    """Gradient of client i's mean squared error (y - <x, w>)^2 at w (numpy)."""
    x = np.asarray(DATA.x[i, :COUNTS[i]], np.float64)
    y = np.asarray(DATA.y[i, :COUNTS[i]], np.float64)
    return -2.0 / COUNTS[i] * x.T @ (y - x @ w)


def theta(params):
    return np.asarray(params["theta"], np.float64)


def test_terms_and_a_clipped_rule_take_the_steps_written_out():
    """3 full-batch steps on F_0(w) + (mu/2)||w - w_start||^2 + <c, w> with gradient
    clipping chained before SGD: w <- w - lr clip(grad F_0 + mu (w - w_start) + c)."""
    mu, lr, clip, steps = 0.8, 0.05, 0.9, 3
    c = {"theta": jnp.array([0.3, -0.2, 0.1])}
    start = MODEL.init(jax.random.key(1))
    term = add_terms(proximal_term(mu), None, linear_term(c))
    update = lambda step: optax.chain(optax.clip_by_global_norm(clip), optax.sgd(step))
    got = jax.jit(lambda p: local_train(MODEL, LocalTraining(steps=steps, lr=lr), p, DATA.x[0],
                                        DATA.y[0], DATA.count[0], jax.random.key(0), lr,
                                        term=term, update=update))(start)
    w0 = w = theta(start)
    clipped = 0
    for _ in range(steps):
        g = grad_by_hand(w, 0) + mu * (w - w0) + theta(c)
        norm = np.linalg.norm(g)
        clipped += norm > clip
        w = w - lr * g * min(1.0, clip / norm)
    assert 0 < clipped < steps               # the rule clipped some steps, not all
    np.testing.assert_allclose(theta(got), w, rtol=1e-5, atol=1e-6)


def test_ifca_variant_with_a_proximal_term_pulls_toward_each_clients_cluster():
    """An IFCA subclass whose ``local_term`` is ``proximal_term(mu)``: each client's steps
    are pulled toward its own cluster model theta_{j_i} (``cluster_pass`` picks it inside
    the streamed chunk), and the cluster means are the hand-written ones."""
    mu, lr, steps = 2.0, 0.05, 2

    class ProxIFCA(IFCA):
        def local_term(self, state):
            return proximal_term(self.cfg.mu)

    @dataclasses.dataclass(frozen=True)
    class ProxConfig(IFCAConfig):
        mu: float = 0.0

    alg = ProxIFCA(MODEL, ProxConfig(num_clusters=2, local=LocalTraining(steps=steps, lr=lr),
                                     chunk=3, mu=mu))   # two chunks, the last one padded
    state = alg.init(jax.random.key(3), DATA)
    new, _ = jax.jit(alg.round)(state, jax.random.key(4), DATA)

    models = np.asarray(state.params["theta"], np.float64)
    trained, assign = [], []
    for i in range(len(COUNTS)):
        x = np.asarray(DATA.x[i, :COUNTS[i]], np.float64)
        y = np.asarray(DATA.y[i, :COUNTS[i]], np.float64)
        j = int(np.argmin([np.mean((y - x @ m) ** 2) for m in models]))
        w = models[j].copy()
        for _ in range(steps):
            w = w - lr * (grad_by_hand(w, i) + mu * (w - models[j]))
        trained.append(w)
        assign.append(j)
    for j in range(2):
        members = [t for t, a in zip(trained, assign) if a == j]
        want = np.mean(members, axis=0) if members else models[j]
        np.testing.assert_allclose(np.asarray(new.params["theta"][j]), want, rtol=1e-5, atol=1e-6)
    plain = jax.jit(IFCA(MODEL, IFCAConfig(num_clusters=2, local=alg.cfg.local, chunk=3)).round)(
        state, jax.random.key(4), DATA)[0]
    assert not np.allclose(plain.params["theta"], new.params["theta"], atol=1e-4)

    class ClippedIFCA(IFCA):
        def local_update(self):
            return optax.sgd(0.1)
    gradient = ClippedIFCA(MODEL, IFCAConfig(num_clusters=2, option="gradient"))
    with pytest.raises(ValueError, match="upload=\"gradient\" takes no steps"):
        gradient.round(state, jax.random.key(4), DATA)


def test_ditto_personal_step_is_sgd_on_the_proximal_personal_objective():
    """Li et al. 2021, Algorithm 1: v <- v - eta (grad f_i(v) + lambda (v - w)), plain SGD
    even when the global model's local training uses momentum."""
    lam, lr, steps = 0.7, 0.1, 3
    local = LocalTraining(steps=1, lr=0.5, momentum=0.9)
    v, w = MODEL.init(jax.random.key(5)), MODEL.init(jax.random.key(6))
    got = jax.jit(lambda v, w: personal_step(MODEL, local, lam, lr, steps, v, w, DATA.x[1],
                                             DATA.y[1], DATA.count[1], jax.random.key(0)))(v, w)
    want = theta(v)
    for _ in range(steps):
        want = want - lr * (grad_by_hand(want, 1) + lam * (want - theta(w)))
    np.testing.assert_allclose(theta(got), want, rtol=1e-5, atol=1e-6)


def test_a_traced_coefficient_is_one_program_and_a_static_zero_is_no_term():
    assert proximal_term(0) is None and proximal_term(0.0) is None
    assert add_terms(None, proximal_term(0.0)) is None
    local = LocalTraining(steps=3, lr=0.1, batch_size=2)
    start = MODEL.init(jax.random.key(1))
    train = lambda term: local_train(MODEL, local, start, DATA.x[2], DATA.y[2], DATA.count[2],
                                     jax.random.key(8), 0.1, term=term)
    grid = jax.jit(jax.vmap(lambda mu: train(proximal_term(mu))))(jnp.array([0.0, 3.0]))
    plain, pulled = jax.jit(lambda: (train(None), train(proximal_term(3.0))))()
    np.testing.assert_allclose(grid["theta"][0], plain["theta"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grid["theta"][1], pulled["theta"], rtol=1e-6, atol=1e-7)
    assert not np.allclose(plain["theta"], pulled["theta"], atol=1e-4)


class DenseBN(nnx.Module):
    """x [n, 3] -> Linear(3, 4) -> BatchNorm -> ReLU -> Linear(4, 1)."""

    def __init__(self, rngs):
        self.a = nnx.Linear(D, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, momentum=0.9, rngs=rngs)
        self.b = nnx.Linear(4, 1, rngs=rngs)

    def __call__(self, x, train=True, mask=None):
        if mask is not None:
            mask = jnp.asarray(mask, bool)[:, None]
        return self.b(jax.nn.relu(self.bn(self.a(x), use_running_average=not train, mask=mask)))


def test_terms_keep_bf16_storage_and_batchnorm_statistics():
    """One SGD step with the term <c, w> moves every parameter by exactly -lr c more than
    the step without it: for a model with BatchNorm statistics (which the term leaves as
    the plain step's) and for bf16 params (still bf16; the gradient c added to the float32
    master copy, so the two differ by -lr c up to bf16 rounding)."""
    lr = 0.25
    bn = from_nnx_stateful("dense-bn", DenseBN, task="regression")
    key = jax.random.key(2)

    def one_step(model, params, c, state=None):
        train = lambda term: local_train(model, LocalTraining(steps=1, lr=lr), params,
                                         DATA.x[0], DATA.y[0], DATA.count[0], key, lr,
                                         state=state, term=term)
        return jax.jit(lambda: (train(None), train(linear_term(c))))()

    params = bn.init(key)
    c = jax.tree.map(lambda a: jnp.full(a.shape, 0.5, jnp.float32), params)
    (p0, s0), (p1, s1) = one_step(bn, params, c, state=bn.init_state(key))
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p0)):
        np.testing.assert_allclose(a - b, -lr * 0.5, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(s1), jax.tree.leaves(s0)):
        np.testing.assert_array_equal(a, b)

    half = cast_floats(MODEL.init(key), "bfloat16")
    c = {"theta": jnp.array([0.5, -1.0, 2.0])}
    p0, p1 = one_step(MODEL, half, c)
    assert p1["theta"].dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(p1["theta"], np.float32) - np.asarray(p0["theta"], np.float32),
                               -lr * np.asarray(c["theta"]), atol=0.05)
