"""Local training on one client (mapped over clients with ``map_clients``).

A client's local training is a composition: the model's loss (plus ``LocalTraining``'s
weight decay), loss terms an algorithm adds from the round's models and per-client state
(``term``), and an optax update rule (``update``). Per-client state lives in the
algorithm's state under the client axis [N, ...]; the per-client function of
``core.clients.stream_clients`` / ``map_client_data`` reads client i's slice and builds the
term from it (``algorithms.ditto``, ``examples/scaffold.py``).

    term(w, w_start) -> float32 scalar, added to the client's training loss at every step:
        w the params being trained (float32 master copy), w_start the params the client's
        local training started from (float32); anything else (mu, the global model, the
        control variates c - c_i) is closed over. ``proximal_term``, ``linear_term``,
        ``add_terms`` build the common ones; None is no term and costs nothing.
    update: None (the config's optimizer at the round's step size), an
        ``optax.GradientTransformation``, or a function lr -> GradientTransformation (so a
        step-size schedule and a traced lr keep working), e.g.
        ``lambda lr: optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(lr))``.

``local_train``, ``client_gradient`` (term only) and ``cluster_pass`` take both.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax import lax

from fedclust_jax.config_check import check_config, model_state_error
from fedclust_jax.core.clients import stream_clients
from fedclust_jax.core.losses import models_loss_accuracy
from fedclust_jax.data.federated import example_mask
from fedclust_jax.core.optim import check_optimizer, make_optimizer
from fedclust_jax.models.resnet9 import is_stateful, running_view
from fedclust_jax.bounds import BelowOne, Fraction, NonNegative, Positive, Size

@dataclasses.dataclass(frozen=True)
class LocalTraining:
    """What a client does with its data in one round.

    steps: local steps tau (full-batch GD steps, or minibatch SGD steps).
    lr: step size gamma; lr_decay: multiplied into lr once per round (1.0 = constant).
    batch_size: None for full-batch steps, else minibatches drawn from one shuffle of the
      client's real examples per round (wrapping around; a client with fewer than
      batch_size examples uses all of them, masked).
    optimizer: "sgd" (with optional momentum) or "adam"; its state starts fresh each round.
    momentum: SGD momentum in [0, 1) (0: plain SGD).
    weight_decay: L2 penalty (wd/2)||theta||^2 added to the training loss; static (shapes,
    the program): steps, batch_size, optimizer; the ``TRACED`` fields may be arrays.
    """

    steps: Size = 10
    lr: Positive = 0.1
    batch_size: Size | None = None
    optimizer: typing.Literal["sgd", "adam"] = "sgd"
    momentum: BelowOne = 0.0
    weight_decay: NonNegative = 0.0
    lr_decay: Fraction = 1.0

    TRACED: typing.ClassVar[tuple[str, ...]] = ("lr", "lr_decay", "momentum", "weight_decay")

    def __post_init__(self):
        if not isinstance(self.steps, int):
            raise ValueError(f"local steps must be an integer, got {self.steps!r}")
        check_config(self)
        check_optimizer(self.optimizer)

    def lr_at(self, round_index) -> jax.Array:
        """Step size in round ``round_index`` (0-based)."""
        return self.lr * jnp.asarray(self.lr_decay, jnp.float32) ** round_index

    def optimizer_for(self, lr) -> optax.GradientTransformation:
        return make_optimizer(self.optimizer, lr, momentum=self.momentum)


def is_static_zero(value) -> bool:
    """True for a Python number equal to 0 (a traced hyperparameter is never skipped)."""
    return isinstance(value, (int, float)) and value == 0


Term = Callable[[Any, Any], jax.Array]   # term(w, w_start) -> float32 scalar


def _float32(tree):
    return jax.tree.map(
        lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def proximal_term(mu, anchor=None) -> Term | None:
    """(mu/2) ||w - a||^2 as a local-loss term: a = ``anchor`` (a params pytree, e.g.
    Ditto's global model w^t) or, when None, the start of the local training w_start
    (FedProx's w^t, or the cluster model theta_j a client of ``cluster_pass`` starts from).
    Its gradient mu (w - a) is taken in float32. mu: a number or a traced scalar; a Python
    0 gives None (statically no term: the program is the one without it)."""
    if is_static_zero(mu):
        return None

    def term(w, start):
        a = _float32(start if anchor is None else anchor)
        return 0.5 * mu * sum(jnp.sum((p.astype(jnp.float32) - q) ** 2)
                              for p, q in zip(jax.tree.leaves(w), jax.tree.leaves(a)))
    return term


def linear_term(c) -> Term:
    """<c, w> = sum over leaves of sum(c * w) as a local-loss term; c: a pytree shaped like
    the params (float32), e.g. SCAFFOLD's correction c - c_i. Its gradient is c, so SGD on
    the loss plus this term takes SCAFFOLD's step w <- w - lr (g(w) - c_i + c)."""
    def term(w, start):
        return sum(jnp.sum(p.astype(jnp.float32) * q.astype(jnp.float32))
                   for p, q in zip(jax.tree.leaves(w), jax.tree.leaves(c)))
    return term


def add_terms(*terms) -> Term | None:
    """The sum of ``terms`` (None entries dropped); None when every entry is None."""
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    if len(terms) == 1:
        return terms[0]
    return lambda w, start: sum(t(w, start) for t in terms)


def update_rule(cfg: LocalTraining, lr, update=None) -> optax.GradientTransformation:
    """The local steps' optax rule: ``cfg``'s optimizer at step size ``lr`` (update None),
    ``update`` itself (a ``GradientTransformation``), or ``update(lr)`` (a function of the
    round's step size, which may be traced). Its state starts fresh every round."""
    if update is None:
        return cfg.optimizer_for(lr)
    if isinstance(update, optax.GradientTransformation):
        return update
    if callable(update):
        rule = update(lr)
        if isinstance(rule, optax.GradientTransformation):
            return rule
        raise ValueError(f"update(lr) must return an optax.GradientTransformation, got "
                         f"{type(rule).__name__}")
    raise ValueError(f"update must be None, an optax.GradientTransformation or a function "
                     f"lr -> GradientTransformation, got {type(update).__name__}")


def training_loss(model, cfg: LocalTraining, params, x, y, mask):
    loss = model.loss(params, x, y, mask)
    if not is_static_zero(cfg.weight_decay):
        loss = loss + 0.5 * cfg.weight_decay * sum(
            jnp.sum(a.astype(jnp.float32) ** 2) for a in jax.tree.leaves(params))
    return loss


def training_loss_with_state(model, cfg: LocalTraining, params, state, x, y, mask):
    """(training loss, new state) of a ``StatefulModel``: ``loss_with_state`` (batch
    statistics of the real rows, running averages updated) plus the L2 penalty."""
    loss, state = model.loss_with_state(params, state, x, y, mask)
    if not is_static_zero(cfg.weight_decay):
        loss = loss + 0.5 * cfg.weight_decay * sum(
            jnp.sum(a.astype(jnp.float32) ** 2) for a in jax.tree.leaves(params))
    return loss, state


def refuse_lost_state(model, state):
    """ValueError when ``model`` keeps BatchNorm statistics but no ``state`` is carried
    (they would be dropped and the model normalised with batch statistics)."""
    if state is None and is_stateful(model):
        raise model_state_error(None, model.name)


def join_state(params, state):
    """What a round trains and averages: ``params`` (``state`` None: a stateless model) or
    the pair (params, state); ``split_state`` undoes it."""
    return params if state is None else (params, state)


def split_state(variables, state):
    """(params, state) of ``join_state``'s output; ``state`` says only whether there is one."""
    return (variables, None) if state is None else variables


def shuffled_order(key, count, n_max: int) -> jax.Array:
    """int32[n_max]: the client's real example indices (< count) in random order first,
    padding after; a masked Gumbel sort, so a traced ``count`` works."""
    noise = jax.random.gumbel(key, (n_max,))
    noise = jnp.where(jnp.arange(n_max) < count, noise, -jnp.inf)
    return jnp.argsort(-noise).astype(jnp.int32)


def minibatch(order, step, count, batch_size: int):
    """(indices int32[B], mask bool[B]) of minibatch ``step`` from a per-round ``order``."""
    pos = step * batch_size + jnp.arange(batch_size)
    idx = order[pos % jnp.maximum(count, 1)]
    mask = jnp.arange(batch_size) < count
    return idx, mask


def local_train(model, cfg: LocalTraining, params, x, y, count, key, lr, state=None, *,
                term: Term | None = None, update=None):
    """``cfg.steps`` optimizer steps on one client from ``params``.

    params: one model's params; x [n_max, ...], y [n_max], count: scalar int; lr: scalar.
    Returns the client's new params, in the params' own dtypes.
    Each step minimises F_i(w) + term(w, w_start) (F_i: the model's loss on the step's
    batch plus ``cfg.weight_decay``'s penalty; w_start: ``params``) with the rule
    ``update_rule(cfg, lr, update)`` (module docstring: the local-step mechanism).
    state: None, or a ``StatefulModel``'s BatchNorm statistics (one model's): every step
    then normalises with the batch statistics of its real rows and updates the running
    averages (``training_loss_with_state``), and the result is the pair (params, state
    after the last step), the state in its own dtypes. A ``StatefulModel`` without
    ``state`` is refused (ValueError).

    Precision: the steps update a float32 copy of the params (master weights) with float32
    optimizer state; each gradient is taken through a cast of that copy to the params'
    stored dtype, so the forward and backward passes run in that dtype (bf16 with bf16
    params) and the gradient arrives in float32; ``term`` sees the float32 copy and the
    float32 start. The result is rounded back to the stored dtype once, at the end. With
    float32 params every cast is the identity.
    """
    refuse_lost_state(model, state)
    n_max = x.shape[0]
    opt = update_rule(cfg, lr, update)
    dtypes = jax.tree.map(lambda a: a.dtype, params)
    stored = lambda p: jax.tree.map(lambda a, d: a.astype(d), p, dtypes)
    params = _float32(params)
    start = params
    plus = (lambda loss, p: loss) if term is None else (lambda loss, p: loss + term(p, start))
    if state is None:
        grad_fn = jax.grad(lambda p, xb, yb, m: plus(
            training_loss(model, cfg, stored(p), xb, yb, m), p))
        grads = lambda p, st, xb, yb, m: (grad_fn(p, xb, yb, m), st)
    else:
        def with_state(p, st, xb, yb, m):
            loss, new = training_loss_with_state(model, cfg, stored(p), st, xb, yb, m)
            return plus(loss, p), new
        state_fn = jax.grad(with_state, has_aux=True)

        def grads(p, st, xb, yb, m):
            g, new = state_fn(p, st, xb, yb, m)
            return g, jax.tree.map(lambda a, b: a.astype(b.dtype), new, st)
    full_mask = example_mask(count, n_max)
    order = None if cfg.batch_size is None else shuffled_order(key, count, n_max)

    def step(carry, s):
        p, opt_state, st = carry
        if cfg.batch_size is None:
            g, st = grads(p, st, x, y, full_mask)
        else:
            idx, m = minibatch(order, s, count, cfg.batch_size)
            g, st = grads(p, st, x[idx], y[idx], m)
        updates, opt_state = opt.update(g, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state, st), None

    (params, _, state_out), _ = lax.scan(step, (params, opt.init(params), state),
                                         jnp.arange(cfg.steps))
    return stored(params) if state is None else (stored(params), state_out)


def client_gradient(model, cfg: LocalTraining, params, x, y, count, key, state=None, *,
                    term: Term | None = None):
    """Gradient of the client's training loss at ``params`` (full batch, or one minibatch
    of ``cfg.batch_size`` when set); the IFCA option-I / BR-IFCA upload. ``term``: a
    local-loss term (module docstring) added at w = w_start = ``params``.

    state: None, or a ``StatefulModel``'s BatchNorm statistics at ``params`` (one model's):
    the forward pass then normalises with the batch statistics of its real rows and
    updates the running averages once, and the result is the pair (gradient, statistics
    after that pass, in their own dtypes). A ``StatefulModel`` without ``state`` is refused.
    """
    refuse_lost_state(model, state)
    n_max = x.shape[0]
    if cfg.batch_size is None:
        xb, yb, m = x, y, example_mask(count, n_max)
    else:
        idx, m = minibatch(shuffled_order(key, count, n_max), 0, count, cfg.batch_size)
        xb, yb = x[idx], y[idx]
    start = _float32(params)
    plus = ((lambda loss, p: loss) if term is None
            else (lambda loss, p: loss + term(_float32(p), start)))
    if state is None:
        return jax.grad(lambda p: plus(training_loss(model, cfg, p, xb, yb, m), p))(params)

    def with_state(p):
        loss, new = training_loss_with_state(model, cfg, p, state, xb, yb, m)
        return plus(loss, p), new
    g, new = jax.grad(with_state, has_aux=True)(params)
    return g, jax.tree.map(lambda a, b: a.astype(b.dtype), new, state)


UPLOADS = ("model", "gradient")


def cluster_pass(model, cfg: LocalTraining, params, data, ids, keys, lr, *, upload: str = "model",
                 fixed_assign=None, active=None, weighting: str = "equal",
                 share_body: bool = False, chunk=None, state=None, term: Term | None = None,
                 update=None):
    """One streamed pass of an IFCA-style round: each participant is assigned, trains and
    adds its upload into per-cluster sums, reading its training data once, inside the chunk.

    params: [K, ...] cluster models theta_j; data: ``FederatedData``; ids: int32[M]
    participants, or None for all N clients (read in place); keys: [M] client keys; lr: step.
    Client i: loss F_i(theta_j) of every model on its training data ([K]); cluster
    j_i = argmin over the ``active`` (bool[K], None = all) models, ties to the lowest index,
    or ``fixed_assign[i]`` (int32[N], -1 = none) when given; from theta_{j_i}
    (theta_0 when j_i = -1) it uploads upload="model": theta_i - theta_{j_i} after
    ``cfg.steps`` local steps (a delta, so sums stay small), or upload="gradient": its
    gradient (``client_gradient``). Weight w_i: 1, or count_i for weighting="samples" (model
    uploads only). Rows: one-hot(j_i) * w_i, plus a last row w_i for every participant when
    ``share_body`` (the weight-shared body's sum over all participants); the K models then
    share one body, so a model that splits scores them with one body pass
    (``core.losses.models_loss_accuracy``).
    state: None, or [K, ...] the cluster models' BatchNorm statistics s_j (a
    ``StatefulModel``): the losses F_i use the running statistics (``running_view``);
    client i starts from (theta_{j_i}, s_{j_i}) and carries the statistics through its
    forward passes (upload="model": ``local_train(..., state=)``; upload="gradient": the
    one pass of ``client_gradient(..., state=)``), and uploads, with the same row, the
    pair (its params upload, s_i - s_{j_i}); ``sums`` is then the pair (params sums
    [G, P], statistics sums [G, S]), so the statistics' weighted means over the same
    members (``mean_from_sums`` of the pair, or of the statistics alone) come with the
    same weights as the params.

    term / update: the local-step mechanism (module docstring): client i's local loss gets
    term(w, theta_{j_i}) (e.g. ``proximal_term(mu)``: FedProx's or an IFCA variant's
    proximal term toward the client's start model), and its steps use ``update``
    (upload="model" only; upload="gradient" takes the gradient of the loss plus term at
    theta_{j_i}).

    Returns (sums [G, ...] float32, totals float32[G], loss [M, K], assign int32[M]),
    G = K (+1 with share_body). Live memory O(G*(P + S) + chunk*(P + activations)).
    """
    if upload not in UPLOADS:
        raise ValueError(f"upload must be one of {UPLOADS}, got {upload!r}")
    if upload == "gradient" and update is not None:
        raise ValueError("an update rule applies to local steps (upload=\"model\"); "
                         "upload=\"gradient\" takes no steps")
    k = jax.tree.leaves(params)[0].shape[0]
    view, scored = running_view(model, params, state)

    def client(i, x, y, count, key):
        loss = models_loss_accuracy(view, scored, x, y, count, shared_body=share_body)[0]
        if fixed_assign is None:
            scored_loss = loss if active is None else jnp.where(active, loss, jnp.inf)
            j = jnp.argmin(scored_loss).astype(jnp.int32)
        else:
            j = fixed_assign[i].astype(jnp.int32)
        start = jax.tree.map(lambda a: a[jnp.clip(j, 0, k - 1)], params)
        delta = lambda t, s: t.astype(jnp.float32) - s.astype(jnp.float32)
        if upload == "gradient":
            if state is None:
                value = client_gradient(model, cfg, start, x, y, count, key, term=term)
            else:
                s_start = jax.tree.map(lambda a: a[jnp.clip(j, 0, k - 1)], state)
                g, s_new = client_gradient(model, cfg, start, x, y, count, key, state=s_start,
                                           term=term)
                value = (g, jax.tree.map(delta, s_new, s_start))
            w = jnp.float32(1)
        else:
            if state is None:
                trained = local_train(model, cfg, start, x, y, count, key, lr, term=term,
                                      update=update)
                value = jax.tree.map(delta, trained, start)
            else:
                s_start = jax.tree.map(lambda a: a[jnp.clip(j, 0, k - 1)], state)
                trained, s_new = local_train(model, cfg, start, x, y, count, key, lr,
                                             state=s_start, term=term, update=update)
                value = (jax.tree.map(delta, trained, start), jax.tree.map(delta, s_new, s_start))
            w = count.astype(jnp.float32) if weighting == "samples" else jnp.float32(1)
        rows = jax.nn.one_hot(j, k, dtype=jnp.float32) * w
        if share_body:
            rows = jnp.concatenate([rows, w[None]])
        return rows, value, (loss, j)

    sums, totals, (loss, assign) = stream_clients(client, data, ids, keys,
                                                  num_groups=k + int(share_body), chunk=chunk)
    return sums, totals, loss, assign
