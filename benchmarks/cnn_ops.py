"""Where the time of one local SGD step of the FEMNIST CNN goes, op by op, in fedclust_jax
(JAX / XLA on the CPU) and in plain PyTorch (oneDNN), on the same inputs.

The step: ``models.cnn.FemnistCNN`` (conv 5x5 1 -> 32 SAME, ReLU, 2x2 max-pool, conv 5x5
32 -> 64 SAME, ReLU, 2x2 max-pool, dense 3136 -> 2048, ReLU, dense 2048 -> 62) on a batch of
100 images 28x28x1, softmax cross-entropy, plain SGD at lr 0.04 (a local step of the
FEMNIST FedAvg round). Inputs are synthetic arrays of the real shapes (seed 0), the same for
every framework (ours NHWC / HWIO / [in, out]; PyTorch gets them as NCHW / OIHW / [out, in]).

Rows, each timed on its own:
  conv1_fwd, conv2_fwd      the convolution and its bias add
  conv2_igrad               conv2's input gradient (conv1's is never formed: its input is data)
  conv1_kgrad, conv2_kgrad  the kernel gradients
  pool_fwd, pool_grad       both 2x2 max-pools together (forward as under differentiation:
                            ours keeps the argmax, PyTorch its indices)
  fc1_fwd, fc1_igrad, fc1_kgrad   dense 3136 -> 2048 (forward with the bias add)
  fc2                       dense 2048 -> 62: forward, input and kernel gradients together
  rest                      the three ReLUs forward and backward, the four bias gradients,
                            softmax cross-entropy and its gradient
  sgd                       the SGD update of all 6,603,710 parameters
  step                      forward + backward + SGD update as one program; beside it the sum
                            of the rows above and the gap (step minus sum): what the rows do
                            not hold (fusion, copies, scheduling, framework overhead)
  step_top                  (JAX) the same step, one call per step at top level

JAX: each row runs the way the round runs it, inside a loop body (``lax.fori_loop`` over
``--iters`` R iterations whose inputs, every array the op reads, are carried through
``lax.optimization_barrier``, so XLA can neither hoist nor drop any of the work; the outputs
stay live), divided by R; the backward rows get the residuals of a ``jax.vjp`` taken before
the loop. The step is the round's own ``core.train.local_train`` (R full-batch steps in its
``lax.scan``); ``step_top`` is ``local_train`` of one step. The ops are the model's
(``models.layers``: ``conv="patches"``, the CPU default, and ``conv="native"``);
``chain_grads`` composes the same functions into the step's gradients.
PyTorch: each op by autograd on that op alone (its input or weight requiring grad, as in
training), the step as the plain PyTorch loop of ``peers.py`` (zero_grad, forward, backward,
``optim.SGD.step``); R calls per timed loop, with 1 and 2 threads (``torch.set_num_threads``).

Variants (columns), each in its own process per pass: JAX with default XLA flags; JAX with
each ``--xla-flags`` set added to XLA_FLAGS (e.g. Eigen's convolutions instead of
YNNPACK's: ``--xla_cpu_experimental_ynn_fusion_type=-individual_convolution``); JAX with
``conv="native"``; PyTorch 1 and 2 threads. ``--repeats`` passes run the variants in
alternation; each child times every row as the median of 3 timed loops after a warm-up, and
the table gives the median over passes, with the 1-minute load before every run.

FLOPs: 2 x the multiply-adds of the convolutions and matrix products, counting SAME
padding's zero taps (as XLA's cost analysis does); pooling, ReLU, bias adds, the loss and
the SGD update count 0. Fractions are of the best ``roofline.gemm_probe`` (f32 a @ b) of the
run, probed in the JAX children.

Correctness: each row's outputs (first pass) are compared with PyTorch 1 thread's (without
PyTorch: with JAX native's) on the same inputs; the largest relative difference (max |a - b|
over max |b|, per array) is printed, and one above 1e-3 fails the run (exit 1). The whole
step's outputs are its loss and the params after it: its gradients themselves can differ by
more where a ReLU input lies within rounding of 0 (a flipped ReLU moves one example's share
of a kernel gradient).

    python benchmarks/cnn_ops.py --peer-python PY [--repeats 3] [--iters 10]
        [--xla-flags "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"]
        [--cores N] [--json FILE] [--out FILE.md] [--quick]

``--peer-python``: a Python with torch and numpy (benchmarks/README.md, "Peers"); one that
lacks them stops the command in one line (exit 2) before any compute. Without it the
command looks for torch in this Python; ``--quick`` (batch 10, 2 iterations, one pass, a
small GEMM probe) then runs JAX alone when none is found. ``--cores 1`` runs every child
on one CPU: the round splits its client walks over the host devices, one walk a core, so a
local step there runs as it does on one core.

``conv="native"`` runs the convolution rows only, with R = 2: inside a loop its kernel
gradients take seconds a call (JAX issue 12868, ``models.layers``). A timed loop that takes
2 s or more is measured once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import median_seconds, output_file, printed_to  # noqa: E402

BATCH, QUICK_BATCH, CLASSES, LR = 100, 10, 62, 0.04
LAYERS = ("conv1", "conv2", "fc1", "fc2")
TOLERANCE = 1e-3
SLOW_S = 2.0        # a timed loop at least this long is measured once
NATIVE_ITERS = 2    # R of conv="native", whose kernel gradients take seconds a call
_CONV1 = 2 * 28 * 28 * 32 * 5 * 5 * 1     # FLOPs per example
_CONV2 = 2 * 14 * 14 * 64 * 5 * 5 * 32
_FC1 = 2 * 3136 * 2048
_FC2 = 2 * 2048 * CLASSES
ROWS = {  # name: (label, FLOPs per example)
    "conv1_fwd": ("conv1 forward", _CONV1),
    "conv1_kgrad": ("conv1 kernel gradient", _CONV1),
    "conv2_fwd": ("conv2 forward", _CONV2),
    "conv2_igrad": ("conv2 input gradient", _CONV2),
    "conv2_kgrad": ("conv2 kernel gradient", _CONV2),
    "pool_fwd": ("pool1 + pool2 forward", 0),
    "pool_grad": ("pool1 + pool2 gradient", 0),
    "fc1_fwd": ("fc1 forward", _FC1),
    "fc1_igrad": ("fc1 input gradient", _FC1),
    "fc1_kgrad": ("fc1 kernel gradient", _FC1),
    "fc2": ("fc2 forward + gradients", 3 * _FC2),
    "rest": ("rest: ReLU, bias gradients, loss", 0),
    "sgd": ("SGD update", 0),
}
STEP_FLOPS = sum(f for _, f in ROWS.values())      # per example
CONV_ROWS = ("conv1_fwd", "conv1_kgrad", "conv2_fwd", "conv2_igrad", "conv2_kgrad")
REFERENCE_ROWS = {  # not in the sum: what a row's formulation costs without its copies
    "conv2_kgrad_products": ("conv2 kernel gradient, its products alone (JAX patches)", _CONV2),
}


# ------------------------------------------------------------------ the inputs
def make_inputs(batch: int = BATCH, seed: int = 0) -> dict:
    """The step's inputs as float32 / int32 numpy arrays in our layout (n = ``batch``): ``x``
    [n, 28, 28, 1], ``y`` [n], ``params/<layer>/<kernel|bias>`` (LeCun-normal kernels, small
    biases), the
    ops' activations (``a1`` [n, 28, 28, 32], ``p1`` [n, 14, 14, 32], ``a2``
    [n, 14, 14, 64], ``f3`` [n, 3136], ``h`` [n, 2048]: ReLU'd normals), the output
    gradients they meet (``dy1``, ``dy2``, ``dq1``, ``dq2``, ``dh``, ``dl``), the rest's
    pre-activations and gradients (``z1``, ``g1``, ``z2``, ``g2``, ``z3``, ``g3``, ``logits``)
    and parameter gradients ``grads/<layer>/<name>``."""
    import numpy as np
    rng = np.random.default_rng(seed)
    normal = lambda *s: rng.standard_normal(s, dtype=np.float32)    # noqa: E731
    relu = lambda *s: np.maximum(normal(*s), 0)                     # noqa: E731
    shapes = {"conv1": ((5, 5, 1, 32), 25), "conv2": ((5, 5, 32, 64), 800),
              "fc1": ((3136, 2048), 3136), "fc2": ((2048, CLASSES), 2048)}
    n = batch
    d = {"x": rng.random((n, 28, 28, 1), dtype=np.float32),
         "y": rng.integers(0, CLASSES, n).astype(np.int32)}
    for layer, (shape, fan_in) in shapes.items():
        d[f"params/{layer}/kernel"] = normal(*shape) / np.float32(fan_in ** 0.5)
        d[f"params/{layer}/bias"] = 0.1 * normal(shape[-1])
        d[f"grads/{layer}/kernel"] = 0.01 * normal(*shape)
        d[f"grads/{layer}/bias"] = 0.01 * normal(shape[-1])
    d.update(a1=relu(n, 28, 28, 32), p1=relu(n, 14, 14, 32), a2=relu(n, 14, 14, 64),
             f3=relu(n, 3136), h=relu(n, 2048), dy1=normal(n, 28, 28, 32),
             dy2=normal(n, 14, 14, 64), dq1=normal(n, 14, 14, 32), dq2=normal(n, 7, 7, 64),
             dh=normal(n, 2048), dl=normal(n, CLASSES), z1=normal(n, 28, 28, 32),
             g1=normal(n, 28, 28, 32), z2=normal(n, 14, 14, 64), g2=normal(n, 14, 14, 64),
             z3=normal(n, 2048), g3=normal(n, 2048), logits=normal(n, CLASSES))
    return {k: np.ascontiguousarray(v) for k, v in d.items()}


def nested(d: dict, group: str) -> dict:
    """``{layer: {name: array}}`` of the flat keys ``<group>/<layer>/<name>`` of ``d``."""
    out: dict = {}
    for k, v in d.items():
        if k.startswith(group + "/"):
            _, layer, name = k.split("/")
            out.setdefault(layer, {})[name] = v
    return out


def param_list(tree: dict) -> list:
    """The leaves of a ``{layer: {kernel, bias}}`` tree in a fixed order."""
    return [tree[layer][name] for layer in LAYERS for name in ("kernel", "bias")]


# ------------------------------------------------------------------ JAX
def jax_ops(impl: str):
    """The step's ops as JAX functions with the model's layers for ``impl`` ("patches" or
    "native", ``models.layers``), called as ``nnx.Conv`` / ``nnx.Linear`` call them:

    conv_fwd(x, w, b), dense_fwd(x, w, b) -> outputs (bias added);
    conv_igrad(x, w), conv_kgrad(x, w), dense_igrad(x, w), dense_kgrad(x, w) -> the
    ``jax.vjp`` pull-back at (x, w) with respect to the input / the kernel: pull(dy) -> (grad,);
    pool_fwd(a) -> (pooled, pull) (2x2, stride 2); relu_fwd(z) -> (relu(z), pull);
    bias_grad(g) -> the bias gradient (sum over all but the last axis);
    loss_grad(logits, y) -> (loss, dlogits) (``Model.loss``: the masked mean cross-entropy);
    sgd(params, grads) -> params - LR * grads."""
    import types

    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    from fedclust_jax.models import layers
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    conv_general = layers.patches_conv if impl == "patches" else lax.conv_general_dilated
    dot_general = layers.dense_dot_general if impl == "patches" else lax.dot_general
    conv = lambda x, w: conv_general(x, w, (1, 1), "SAME", lhs_dilation=(1, 1),  # noqa: E731
                                     rhs_dilation=(1, 1), dimension_numbers=dn,
                                     feature_group_count=1, precision=None)
    dense = lambda x, w: dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())),  # noqa: E731
                                     precision=None)
    pool = lambda a: layers.max_pool(a, (2, 2), (2, 2), impl=impl)  # noqa: E731

    def loss(logits, y):
        per = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        w = jnp.ones(per.shape, per.dtype)
        return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)

    return types.SimpleNamespace(
        impl=impl, conv_fwd=lambda x, w, b: conv(x, w) + b,
        conv_igrad=lambda x, w: jax.vjp(lambda v: conv(v, w), x)[1],
        conv_kgrad=lambda x, w: jax.vjp(lambda v: conv(x, v), w)[1],
        dense_fwd=lambda x, w, b: dense(x, w) + b,
        dense_igrad=lambda x, w: jax.vjp(lambda v: dense(v, w), x)[1],
        dense_kgrad=lambda x, w: jax.vjp(lambda v: dense(x, v), w)[1],
        pool_fwd=lambda a: jax.vjp(pool, a), relu_fwd=lambda z: jax.vjp(jax.nn.relu, z),
        bias_grad=lambda g: jnp.sum(g, axis=tuple(range(g.ndim - 1))),
        loss_grad=jax.value_and_grad(loss),
        sgd=lambda p, g: jax.tree.map(lambda a, b: a - LR * b, p, g))


def chain_grads(ops, params: dict, x, y):
    """(loss, gradients {layer: {kernel, bias}}) of the step's loss, composed from ``ops``
    (``jax_ops``): the functions the rows time, in the order of a forward and backward pass."""
    p = params
    k = lambda layer: p[layer]["kernel"]                           # noqa: E731
    first = lambda pull, g: pull(g)[0]                             # noqa: E731
    a1, relu1 = ops.relu_fwd(ops.conv_fwd(x, k("conv1"), p["conv1"]["bias"]))
    q1, pool1 = ops.pool_fwd(a1)
    a2, relu2 = ops.relu_fwd(ops.conv_fwd(q1, k("conv2"), p["conv2"]["bias"]))
    q2, pool2 = ops.pool_fwd(a2)
    f3 = q2.reshape(x.shape[0], -1)
    h, relu3 = ops.relu_fwd(ops.dense_fwd(f3, k("fc1"), p["fc1"]["bias"]))
    logits = ops.dense_fwd(h, k("fc2"), p["fc2"]["bias"])
    loss, dl = ops.loss_grad(logits, y)
    g = {"fc2": {"kernel": first(ops.dense_kgrad(h, k("fc2")), dl), "bias": ops.bias_grad(dl)}}
    dz3 = first(relu3, first(ops.dense_igrad(h, k("fc2")), dl))
    g["fc1"] = {"kernel": first(ops.dense_kgrad(f3, k("fc1")), dz3), "bias": ops.bias_grad(dz3)}
    dq2 = first(ops.dense_igrad(f3, k("fc1")), dz3).reshape(q2.shape)
    dz2 = first(relu2, first(pool2, dq2))
    g["conv2"] = {"kernel": first(ops.conv_kgrad(q1, k("conv2")), dz2),
                  "bias": ops.bias_grad(dz2)}
    dz1 = first(relu1, first(pool1, first(ops.conv_igrad(q1, k("conv2")), dz2)))
    g["conv1"] = {"kernel": first(ops.conv_kgrad(x, k("conv1")), dz1), "bias": ops.bias_grad(dz1)}
    return loss, g


def jax_rows(ops) -> dict:
    """Row name -> setup(d) -> (f, carried): ``d`` the inputs (``make_inputs``' keys, params
    and grads nested); ``f(*carried)`` -> (checked outputs, other outputs) is the row's work.
    Everything the op reads is carried, as in the round, where every step gets new values:
    its inputs and weights, and for a backward op the residuals its forward keeps (the
    leaves of a ``jax.vjp`` pull-back taken once in the setup, outside the timed loop)."""
    import jax

    def carried_pull(pull):
        """(f(g, *residuals) -> pull's cotangent, residual leaves) of a pull-back."""
        leaves, tree = jax.tree.flatten(pull)
        return lambda g, *res: jax.tree.unflatten(tree, res)(g)[0], leaves

    def forward(fn, *xs):
        return lambda *xs: (fn(*xs), ()), xs

    def backward(pull, dy):
        f, res = carried_pull(pull)
        return lambda dy, *res: (f(dy, *res), ()), (dy, *res)

    def pool_fwd(d):
        def f(a1, a2):      # as under differentiation: the pull-backs' residuals kept too
            (q1, pull1), (q2, pull2) = ops.pool_fwd(a1), ops.pool_fwd(a2)
            kept = [r for r in jax.tree.leaves((pull1, pull2)) if r is not a1 and r is not a2]
            return (q1, q2), kept
        return f, (d["a1"], d["a2"])

    def pool_grad(d):
        (f1, r1), (f2, r2) = (carried_pull(ops.pool_fwd(d[a])[1]) for a in ("a1", "a2"))
        return (lambda dq1, dq2, *res: ((f1(dq1, *res[:len(r1)]), f2(dq2, *res[len(r1):])), ()),
                (d["dq1"], d["dq2"], *r1, *r2))

    def fc2(d):
        def f(h, w, b, dl):
            return (ops.dense_fwd(h, w, b), ops.dense_igrad(h, w)(dl)[0],
                    ops.dense_kgrad(h, w)(dl)[0]), ()
        return f, (d["h"], *layer(d, "fc2"), d["dl"])

    def rest(d):
        def f(z1, g1, z2, g2, z3, g3, logits, y):
            outs, grads = [], []
            for z, g in ((z1, g1), (z2, g2), (z3, g3)):
                r, pull = ops.relu_fwd(z)
                outs.append(r)
                grads.append(pull(g)[0])
            loss, dl = ops.loss_grad(logits, y)
            return (*outs, *grads, *(ops.bias_grad(g) for g in (*grads, dl)), loss, dl), ()
        return f, tuple(d[k] for k in ("z1", "g1", "z2", "g2", "z3", "g3", "logits", "y"))

    def layer(d, name):
        return d["params"][name]["kernel"], d["params"][name]["bias"]

    def kernel(d, name):
        return d["params"][name]["kernel"]

    def kgrad_products(d):
        """conv2's kernel gradient as ``layers._kernel_gradient`` forms it for C > 1, its
        per-row operands built in the setup: the kh * H' matrix products alone."""
        from fedclust_jax.models import layers
        rows, dyr = layers._kernel_gradient_operands(d["p1"], d["dy2"], (5, 5), ((2, 2), (2, 2)))
        return (lambda rows, dyr: (layers._kernel_gradient_products(rows, dyr, (5, 5), None), ()),
                (rows, dyr))

    rows = {
        "conv1_fwd": lambda d: forward(ops.conv_fwd, d["x"], *layer(d, "conv1")),
        "conv1_kgrad": lambda d: backward(ops.conv_kgrad(d["x"], kernel(d, "conv1")), d["dy1"]),
        "conv2_fwd": lambda d: forward(ops.conv_fwd, d["p1"], *layer(d, "conv2")),
        "conv2_igrad": lambda d: backward(ops.conv_igrad(d["p1"], kernel(d, "conv2")), d["dy2"]),
        "conv2_kgrad": lambda d: backward(ops.conv_kgrad(d["p1"], kernel(d, "conv2")), d["dy2"]),
        "pool_fwd": pool_fwd,
        "pool_grad": pool_grad,
        "fc1_fwd": lambda d: forward(ops.dense_fwd, d["f3"], *layer(d, "fc1")),
        "fc1_igrad": lambda d: backward(ops.dense_igrad(d["f3"], kernel(d, "fc1")), d["dh"]),
        "fc1_kgrad": lambda d: backward(ops.dense_kgrad(d["f3"], kernel(d, "fc1")), d["dh"]),
        "fc2": fc2,
        "rest": rest,
        "sgd": lambda d: (lambda p, g: (param_list(ops.sgd(p, g)), ()), (d["params"], d["grads"])),
    }
    if ops.impl == "patches":
        rows["conv2_kgrad_products"] = kgrad_products
    return rows


def prepare(setup, d):
    """(f, carried) of row ``setup`` on the inputs ``d``, the carried arrays computed here (a
    backward row's residuals: its forward), so that the timed program holds only the row."""
    import jax
    found = {}

    def carried_of(d):
        found["f"], carried = setup(d)
        return carried

    carried = jax.jit(carried_of)(d)
    return found["f"], carried


def _looped(f, iters, carried):
    """``iters`` iterations of ``f(*carried)`` in one ``lax.fori_loop``; returns the last
    iteration's outputs. Each iteration passes its inputs and outputs on through
    ``lax.optimization_barrier``, so XLA cannot see that the inputs stay the same: nothing is
    hoisted out of the loop or dropped, and nothing is copied."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    shapes = jax.eval_shape(f, *carried)
    out0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def body(_, carry):
        xs, _ = carry
        return lax.optimization_barrier((xs, f(*xs)))

    return lax.fori_loop(0, iters, body, (carried, out0))[1]


def checked(f, carried) -> list:
    """The checked outputs of ``f(*carried)`` (one call, jitted) as numpy arrays."""
    import jax
    import numpy as np
    return [np.asarray(a) for a in jax.tree.leaves(jax.jit(lambda c: f(*c)[0])(carried))]


def _time_program(program, args, calls: int) -> float:
    """Median seconds of ``calls`` runs of the jitted ``program`` on ``args`` after untimed
    runs (compiled first, ``_common.median_seconds``); a first run of ``SLOW_S`` seconds or
    more is the figure itself."""
    import jax
    compiled = program.lower(*args).compile()
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - t0
    return first if first >= SLOW_S else median_seconds(compiled, args, calls)


def _per_call(fn, iters: int, calls: int) -> float:
    """Median over ``calls`` loops of ``iters`` calls of ``fn`` (after 2 untimed calls) of the
    seconds per call; a first call of ``SLOW_S`` seconds or more is the figure itself."""
    t0 = time.perf_counter()
    fn()
    if time.perf_counter() - t0 >= SLOW_S:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def child_jax(spec: dict) -> dict:
    """One JAX variant: seconds per call of its rows (``spec["rows"]``), the step in a loop and
    at top level (``spec["step"]``), a GEMM probe, and (``spec["outputs"]``) the rows'
    outputs written beside the inputs."""
    import functools

    import jax
    import jax.numpy as jnp
    import jaxlib
    import numpy as np

    from fedclust_jax.core.train import LocalTraining, local_train
    from fedclust_jax.models.cnn import femnist_cnn
    from roofline import gemm_probe
    raw = np.load(os.path.join(spec["folder"], "inputs.npz"))
    flat = {k: jnp.asarray(raw[k]) for k in raw.files}
    d = {k: v for k, v in flat.items() if "/" not in k}
    d.update(params=nested(flat, "params"), grads=nested(flat, "grads"))
    ops = jax_ops(spec["conv"])
    iters, calls, n = spec["iters"], spec["calls"], spec["batch"]
    seconds, outputs = {}, {}
    for name, setup in jax_rows(ops).items():
        if name not in spec["rows"]:
            continue
        f, carried = prepare(setup, d)
        program = jax.jit(functools.partial(_looped, f, iters))
        seconds[name] = _time_program(program, (carried,), calls) / iters
        if spec["outputs"]:
            outputs[name] = checked(f, carried)
    model = femnist_cnn(CLASSES, conv=spec["conv"])
    lr = jnp.float32(LR)

    def steps(r):
        return jax.jit(lambda p, x, y, lr: local_train(model, LocalTraining(steps=r, lr=LR), p,
                                                       x, y, n, jax.random.key(0), lr))

    args = (d["params"], d["x"], d["y"], lr)
    if spec["step"]:
        seconds["step"] = _time_program(steps(iters), args, calls) / iters
        one = steps(1)
        seconds["step_top"] = _per_call(lambda: jax.block_until_ready(one(*args)), iters, calls)
        if spec["outputs"]:
            loss = jax.jit(model.loss)(d["params"], d["x"], d["y"], jnp.ones((n,), bool))
            outputs["step"] = [np.asarray(a) for a in [loss] + param_list(one(*args))]
    if spec["outputs"]:
        np.savez(os.path.join(spec["folder"], f"out_{spec['label']}.npz"),
                 **{f"{k}/{i}": a for k, arrays in outputs.items() for i, a in enumerate(arrays)})
    sizes, reps = {"quick": ((512, 1024), 2), "full": ((2048, 3072, 4096), 3),
                   "short": ((2048,), 3)}[spec["probe"]]
    return dict(seconds=seconds, gemm_flops_per_s=gemm_probe(sizes, reps),
                version=f"jax {jax.__version__}, jaxlib {jaxlib.__version__}",
                backend=jax.default_backend(), conv=spec["conv"],
                xla_flags=os.environ.get("XLA_FLAGS", ""))


# ------------------------------------------------------------------ PyTorch
def child_torch(spec: dict) -> dict:
    """One PyTorch variant (``spec["threads"]`` threads): seconds per call of every row and
    of the whole step, and (``spec["outputs"]``) the rows' outputs in our layout."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import peers
    torch.set_num_threads(spec["threads"])
    raw = np.load(os.path.join(spec["folder"], "inputs.npz"))
    d = {k: raw[k] for k in raw.files}
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))                  # noqa: E731
    nchw = lambda a: t(a).permute(0, 3, 1, 2).contiguous()                    # noqa: E731
    oihw = lambda w: t(w).permute(3, 2, 0, 1).contiguous()                    # noqa: E731
    nhwc = lambda v: v.detach().permute(0, 2, 3, 1).numpy()                   # noqa: E731
    hwio = lambda v: v.detach().permute(2, 3, 1, 0).numpy()                   # noqa: E731
    arr = lambda v: v.detach().numpy()                                        # noqa: E731
    leaf = lambda v: v.detach().clone().requires_grad_()                      # noqa: E731
    grad = torch.autograd.grad
    P = {k[len("params/"):]: d[k] for k in d if k.startswith("params/")}
    w1, w2 = leaf(oihw(P["conv1/kernel"])), leaf(oihw(P["conv2/kernel"]))
    b1, b2 = leaf(t(P["conv1/bias"])), leaf(t(P["conv2/bias"]))
    W3, b3 = leaf(t(P["fc1/kernel"].T)), leaf(t(P["fc1/bias"]))
    W4, b4 = t(P["fc2/kernel"].T), t(P["fc2/bias"])
    x, p1 = nchw(d["x"]), nchw(d["p1"])
    dy1, dy2, dq1, dq2 = (nchw(d[k]) for k in ("dy1", "dy2", "dq1", "dq2"))
    f3, dh, h, dl = (t(d[k]) for k in ("f3", "dh", "h", "dl"))
    a1, a2 = leaf(nchw(d["a1"])), leaf(nchw(d["a2"]))

    # backward rows: one op's graph kept (retain_graph), only the wanted input requiring grad
    p1_g, w1_g, w2_g, f3_g, W3_g = (leaf(v) for v in (p1, w1, w2, f3, W3))
    p1_f, f3_f = leaf(p1), leaf(f3)        # forward rows: inputs requiring grad, as in training
    out_c2i = F.conv2d(p1_g, w2.detach(), b2.detach(), padding=2)
    out_c1k = F.conv2d(x, w1_g, b1.detach(), padding=2)
    out_c2k = F.conv2d(p1, w2_g, b2.detach(), padding=2)
    out_q = F.max_pool2d(a1, 2), F.max_pool2d(a2, 2)
    out_f1i = F.linear(f3_g, W3.detach(), b3.detach())
    out_f1k = F.linear(f3, W3_g, b3.detach())

    def fc2():
        hg, Wg = leaf(h), leaf(W4)
        out = F.linear(hg, Wg, b4)
        return (out, *grad(out, (hg, Wg), dl))

    zs = [(leaf(nchw(d["z1"])), nchw(d["g1"])), (leaf(nchw(d["z2"])), nchw(d["g2"])),
          (leaf(t(d["z3"])), t(d["g3"]))]
    logits, y = leaf(t(d["logits"])), t(d["y"]).long()

    def rest():
        outs, grads = [], []
        for z, g in zs:
            r = F.relu(z)
            outs.append(r)
            grads.append(grad(r, z, g)[0])
        loss = F.cross_entropy(logits, y)
        dlog = grad(loss, logits)[0]
        sums = [v.sum(dim=(0, 2, 3)) for v in grads[:2]] + [v.sum(0) for v in (grads[2], dlog)]
        return outs, grads, sums, loss, dlog

    names = [f"{layer}/{n}" for layer in LAYERS for n in ("kernel", "bias")]
    sgd_params = [leaf(t(d[f"params/{n}"])) for n in names]
    for p, n in zip(sgd_params, names):
        p.grad = t(d[f"grads/{n}"]).clone()
    sgd_opt = torch.optim.SGD(sgd_params, lr=LR)

    rows = {
        "conv1_fwd": lambda: F.conv2d(x, w1, b1, padding=2),
        "conv1_kgrad": lambda: grad(out_c1k, w1_g, dy1, retain_graph=True)[0],
        "conv2_fwd": lambda: F.conv2d(p1_f, w2, b2, padding=2),
        "conv2_igrad": lambda: grad(out_c2i, p1_g, dy2, retain_graph=True)[0],
        "conv2_kgrad": lambda: grad(out_c2k, w2_g, dy2, retain_graph=True)[0],
        "pool_fwd": lambda: (F.max_pool2d(a1, 2), F.max_pool2d(a2, 2)),
        "pool_grad": lambda: (grad(out_q[0], a1, dq1, retain_graph=True)[0],
                              grad(out_q[1], a2, dq2, retain_graph=True)[0]),
        "fc1_fwd": lambda: F.linear(f3_f, W3, b3),
        "fc1_igrad": lambda: grad(out_f1i, f3_g, dh, retain_graph=True)[0],
        "fc1_kgrad": lambda: grad(out_f1k, W3_g, dh, retain_graph=True)[0],
        "fc2": fc2,
        "rest": rest,
        "sgd": sgd_opt.step,
    }
    outputs = {}
    if spec["outputs"]:
        r = {k: rows[k]() for k in rows if k != "sgd"}
        sgd_opt.step()                        # one update from the inputs' params
        stepped = [p.detach().clone() for p in sgd_params]
        outs, grads, sums, loss, dlog = r["rest"]
        outputs = {
            "conv1_fwd": [nhwc(r["conv1_fwd"])], "conv1_kgrad": [hwio(r["conv1_kgrad"])],
            "conv2_fwd": [nhwc(r["conv2_fwd"])], "conv2_igrad": [nhwc(r["conv2_igrad"])],
            "conv2_kgrad": [hwio(r["conv2_kgrad"])],
            "pool_fwd": [nhwc(v) for v in r["pool_fwd"]],
            "pool_grad": [nhwc(v) for v in r["pool_grad"]],
            "fc1_fwd": [arr(r["fc1_fwd"])], "fc1_igrad": [arr(r["fc1_igrad"])],
            "fc1_kgrad": [arr(r["fc1_kgrad"]).T], "fc2": [arr(r["fc2"][0]), arr(r["fc2"][1]),
                                                          arr(r["fc2"][2]).T],
            "rest": ([nhwc(v) for v in outs[:2]] + [arr(outs[2])]
                     + [nhwc(v) for v in grads[:2]] + [arr(grads[2])]
                     + [arr(v) for v in sums] + [arr(loss), arr(dlog)]),
            "sgd": [arr(v) for v in stepped]}
    seconds = {k: _per_call(fn, spec["iters"], spec["calls"]) for k, fn in rows.items()}

    net = peers._torch_net("fedavg-femnist")()
    net.load_state_dict({k: t(v) for k, v in peers.torch_layout_cnn(nested(d, "params")).items()})
    xs, ys = nchw(d["x"]), t(d["y"]).long()
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(xs), ys)
        loss.backward()
        opt.step()
        return loss

    if spec["outputs"]:       # the loss and the params after one step, in our layout
        loss = step()
        w = dict(net.named_parameters())
        fc1 = arr(w["fc1.weight"]).reshape(2048, 64, 7, 7).transpose(2, 3, 1, 0).reshape(3136, 2048)
        outputs["step"] = [arr(loss), hwio(w["conv1.weight"]), arr(w["conv1.bias"]),
                           hwio(w["conv2.weight"]), arr(w["conv2.bias"]), fc1, arr(w["fc1.bias"]),
                           arr(w["fc2.weight"]).T, arr(w["fc2.bias"])]
        np.savez(os.path.join(spec["folder"], f"out_{spec['label']}.npz"),
                 **{f"{k}/{i}": np.array(a) for k, arrays in outputs.items()
                    for i, a in enumerate(arrays)})
    seconds["step"] = _per_call(step, spec["iters"], spec["calls"])
    return dict(seconds=seconds, version=f"torch {torch.__version__}",
                threads=torch.get_num_threads())


# ------------------------------------------------------------------ the parent
def missing_torch(python: str) -> list[str]:
    """What ``python`` cannot import of torch and numpy (one query)."""
    code = ("import importlib.util, json; print(json.dumps([m for m in ('torch', 'numpy') "
            "if importlib.util.find_spec(m) is None]))")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return [f"a working Python at {python}"]


def variants(a, with_torch: bool) -> list[dict]:
    """The columns, in the order each pass runs them (frameworks alternating)."""
    jax_ = lambda label, title, conv="patches", flags="": dict(  # noqa: E731
        label=label, title=title, kind="jax", conv=conv, flags=flags)
    torch_ = lambda n: dict(label=f"torch-{n}t", kind="torch", threads=n,  # noqa: E731
                            title=f"PyTorch {n} thread{'s' * (n > 1)}")
    out = [jax_("jax", "JAX default")]
    out += [torch_(1)] * with_torch
    out += [jax_(f"jax-flags{i + 1}", f"JAX flags {i + 1}", flags=f)
            for i, f in enumerate(a.xla_flags)]
    out += [dict(jax_(f"jax-python{i + 2}", f"JAX default, Python {i + 2}"), python=py)
            for i, py in enumerate(a.jax_python)]
    out += [torch_(2)] * with_torch
    out.append(dict(jax_("jax-native", "JAX conv=native", conv="native"), step=False,
                    rows=CONV_ROWS, iters=min(a.iters, NATIVE_ITERS)))
    return out


def run_child(a, v: dict, folder: str, outputs: bool, probe: str) -> dict:
    """One variant's run in a fresh process: its record, or {"error": its last line}."""
    spec = dict(dict(iters=a.iters, step=True, rows=list(ROWS) + list(REFERENCE_ROWS)), **v,
                folder=folder,
                calls=1 if a.quick else 3, outputs=outputs, probe=probe, batch=a.batch)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if v["kind"] == "jax":
        python = v.get("python") or sys.executable
        env["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), v["flags"]) if f)
    else:
        python = a.peer_python
        env["OMP_NUM_THREADS"] = str(v["threads"])
    t0 = time.perf_counter()
    cpus = sorted(os.sched_getaffinity(0))[:a.cores] if a.cores else None
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.run([python, os.path.abspath(__file__), "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=env, cwd=ROOT, preexec_fn=pin)
    wall = time.perf_counter() - t0
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return dict(error=f"exit {proc.returncode}: {tail[:300]}", wall_s=wall)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), wall_s=wall)


def rel_diff(a, b) -> float:
    """max |a - b| / max |b| (0 when both are 0)."""
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    return err / scale if scale else err


def differences(folder: str, labels: list[str], reference: str) -> dict:
    """{row: {label: largest relative difference of its outputs from ``reference``'s}}."""
    import numpy as np
    load = lambda lab: dict(np.load(os.path.join(folder, f"out_{lab}.npz")))  # noqa: E731
    ref = load(reference)
    out: dict = {}
    for lab in labels:
        if lab == reference or not os.path.exists(os.path.join(folder, f"out_{lab}.npz")):
            continue
        mine = load(lab)
        rows_run = {key.split("/")[0] for key in mine}
        for key in ref:
            row = key.split("/")[0]
            if row not in rows_run:         # not run by this variant (native: the step)
                continue
            worst = rel_diff(mine[key], ref[key]) if key in mine else float("inf")
            out.setdefault(row, {})[lab] = max(out.get(row, {}).get(lab, 0.0), worst)
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def summarize(runs: list, vs: list[dict]) -> dict:
    """{label: {row: median seconds over passes}} of the runs without errors, with the sum of
    the op rows ("sum") and the gap (step - sum)."""
    med = {}
    for v in vs:
        ok = [r for r in runs if r["label"] == v["label"] and "seconds" in r]
        if not ok:
            continue
        rows = {k: statistics.median(r["seconds"][k] for r in ok) for k in ok[0]["seconds"]}
        if all(k in rows for k in ROWS):
            rows["sum"] = sum(rows[k] for k in ROWS)
            if "step" in rows:
                rows["gap"] = rows["step"] - rows["sum"]
        med[v["label"]] = rows
    return med


def table(med: dict, vs: list[dict], probe: float, diffs: dict, reference: str,
          batch: int) -> list[str]:
    cols = sorted((v for v in vs if v["label"] in med), key=lambda v: v["kind"] != "jax")
    lines = ["| row | " + " | ".join(f"{v['title']} ms" for v in cols) + " | GFLOP | "
             + " | ".join(f"{v['title']} GFLOP/s (of probe)" for v in cols)
             + f" | max rel. diff from {reference} |",
             "|---|" + "---:|" * (2 * len(cols) + 1) + "---:|"]
    names = list(ROWS) + ["sum", "step", "gap", "step_top"] + list(REFERENCE_ROWS)
    labels = {**{k: lab for k, (lab, _) in (ROWS | REFERENCE_ROWS).items()},
              "sum": "sum of the rows above",
              "step": "whole step (forward + backward + SGD), in a loop",
              "gap": "gap: whole step - sum", "step_top": "whole step at top level"}
    per_example = {**{k: f for k, (_, f) in (ROWS | REFERENCE_ROWS).items()}, "sum": STEP_FLOPS,
                   "step": STEP_FLOPS, "gap": 0, "step_top": STEP_FLOPS}
    flops = {k: batch * f for k, f in per_example.items()}
    for name in names:
        cells_ms, cells_rate = [], []
        for v in cols:
            s = med[v["label"]].get(name)
            cells_ms.append("—" if s is None else f"{1e3 * s:.2f}")
            rate = flops[name] / s if s and flops[name] and name != "gap" else None
            cells_rate.append("—" if rate is None else f"{rate / 1e9:.0f} ({rate / probe:.2f})")
        d = diffs.get(name)
        diff = "—" if not d else f"{max(d.values()):.1e}"
        lines.append(f"| {labels[name]} | " + " | ".join(cells_ms)
                     + f" | {flops[name] / 1e9:.3f} | " + " | ".join(cells_rate) + f" | {diff} |")
    return lines


def _joined(argv: list, option: str) -> list:
    """``argv`` with each ``option VALUE`` as ``option=VALUE``: a value that starts with "--"
    (an XLA flag) would otherwise read as an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == option and i + 1 < len(argv):
            out.append(f"{option}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer-python", default=None,
                   help="a Python with torch and numpy (default: this one)")
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved passes over the variants (default 3; --quick 1)")
    p.add_argument("--iters", type=int, default=None,
                   help="R: op calls per timed loop (default 10; --quick 2)")
    p.add_argument("--xla-flags", action="append", default=[], metavar="F",
                   help="a column of JAX with F added to XLA_FLAGS (repeatable)")
    p.add_argument("--jax-python", action="append", default=[], metavar="PY",
                   help="a column of JAX default run by another Python with jax, flax and "
                        "optax (another jax release; repeatable)")
    p.add_argument("--cores", type=int, default=None, metavar="N",
                   help="run every child on the first N CPUs this process may use "
                        "(sched_setaffinity; 1: a core, as each client walk of the round gets "
                        "one); default all")
    p.add_argument("--json", type=output_file, default=None, help="write the records here")
    p.add_argument("--out", type=output_file, default=None, help="also write the table here")
    p.add_argument("--quick", action="store_true",
                   help="2 iterations, one pass, a small GEMM probe (CI); JAX alone when no "
                        "PyTorch is found")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(_joined(sys.argv[1:] if argv is None else list(argv), "--xla-flags"))
    if a.child:
        spec = json.loads(a.child)
        record = (child_jax if spec["kind"] == "jax" else child_torch)(spec)
        print(json.dumps(record, default=float), flush=True)
        return record
    if (a.repeats is not None and a.repeats < 1) or (a.iters is not None and a.iters < 1):
        p.error("--repeats and --iters must be >= 1")
    if a.cores is not None and not 1 <= a.cores <= len(os.sched_getaffinity(0)):
        p.error(f"--cores must be between 1 and the {len(os.sched_getaffinity(0))} CPUs this "
                f"process may use, got {a.cores}")
    if any(not f.strip() for f in a.xla_flags):
        p.error("--xla-flags needs a flag, e.g. --xla-flags "
                "\"--xla_cpu_experimental_ynn_fusion_type=-individual_convolution\"")
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.iters = a.iters or (2 if a.quick else 10)
    a.batch = QUICK_BATCH if a.quick else BATCH
    named = a.peer_python is not None
    a.peer_python = a.peer_python or sys.executable
    missing = missing_torch(a.peer_python)
    if missing and (named or not a.quick):
        print(f"cnn_ops.py: {a.peer_python} lacks {', '.join(missing)}; name a Python that has "
              f"torch and numpy with --peer-python (benchmarks/README.md, \"Peers\")",
              file=sys.stderr)
        raise SystemExit(2)
    with printed_to(a.out, __file__):
        result = measure(a, with_torch=not missing)
    worst = [(row, lab, x) for row, d in result["differences"].items() for lab, x in d.items()
             if not x <= TOLERANCE]
    if result["errors"]:
        print(f"cnn_ops.py: {result['errors'][0]}", file=sys.stderr)
        raise SystemExit(1)
    if worst:
        row, lab, x = max(worst, key=lambda w: w[2])
        print(f"cnn_ops.py: {row}: {lab} differs from {result['reference']} by {x:.1e} relative "
              f"(> {TOLERANCE:g})", file=sys.stderr)
        raise SystemExit(1)
    return result


def measure(a, with_torch: bool) -> dict:
    import numpy as np
    vs = variants(a, with_torch)
    runs = []
    with tempfile.TemporaryDirectory(prefix="cnn_ops_") as folder:
        np.savez(os.path.join(folder, "inputs.npz"), **make_inputs(a.batch))
        for r in range(a.repeats):
            for i, v in enumerate(vs):
                load = os.getloadavg()
                probe = ("quick" if a.quick else "full" if (r, i) == (0, 0)
                         else "short") if v["kind"] == "jax" else None
                rec = run_child(a, v, folder, outputs=r == 0, probe=probe)
                rec.update(label=v["label"], pass_=r + 1, load_before=load)
                runs.append(rec)
                ms = 1e3 * sum(rec.get("seconds", {}).get(k, 0) for k in ROWS)
                what = (rec["error"] if "error" in rec else f"sum of its rows {ms:.1f} ms"
                        + (f", step {1e3 * rec['seconds']['step']:.1f} ms"
                           if "step" in rec["seconds"] else ""))
                print(f"pass {r + 1} {v['title']}: {what}, {rec['wall_s']:.0f} s wall "
                      f"(load before {load[0]:.2f})", file=sys.stderr, flush=True)
        reference = "torch-1t" if with_torch else "jax-native"
        diffs = differences(folder, [v["label"] for v in vs], reference)
    med = summarize(runs, vs)
    probes = [r["gemm_flops_per_s"] for r in runs if "gemm_flops_per_s" in r]
    probe = max(probes) if probes else float("nan")
    version = lambda kind: next((r["version"] for r in runs if "version" in r  # noqa: E731
                                 and r["label"].startswith(kind)), "not run")
    errors = [f"pass {r['pass_']} {r['label']}: {r['error']}" for r in runs if "error" in r]
    titles = {v["label"]: v["title"] for v in vs}
    print(f"Machine: {cpu_model()}, {os.cpu_count()} cores"
          + (f" (every child on {a.cores} of them, --cores)" if a.cores else "")
          + f"; {version('jax')}; "
          + (f"{version('torch')} ({a.peer_python})" if with_torch else "PyTorch not run (no torch "
             "found)")
          + f"; GEMM probe (f32 a @ b, roofline.gemm_probe, best of {len(probes)} in this run): "
          f"{probe / 1e9:.1f} GFLOP/s (all: " + ", ".join(f"{x / 1e9:.1f}" for x in probes) + ").")
    print(f"\nStep: FEMNIST CNN, batch {a.batch}" + (" (--quick; the round's is 100)" if a.quick
                                                     else "") + f", softmax cross-entropy, SGD "
          f"lr {LR}; synthetic inputs of the real shapes. R = {a.iters} calls per timed loop "
          f"(JAX conv=native: {min(a.iters, NATIVE_ITERS)}, the convolution rows only: its kernel "
          f"gradients take seconds a call); each child's figure is "
          + ("one timed loop" if a.quick else "the median of 3 timed loops")
          + f" after a warm-up (one loop when it takes {SLOW_S:g} s or more); the table gives "
          f"the median over {a.repeats} interleaved pass{'es' * (a.repeats > 1)}.")
    print("\nLoads (1-minute, before each run): " + "; ".join(
        f"pass {p_}: " + ", ".join(f"{titles[r['label']]} {r['load_before'][0]:.2f}"
                                   for r in runs if r["pass_"] == p_)
        for p_ in range(1, a.repeats + 1)) + ".")
    print()
    print("\n".join(table(med, vs, probe, diffs, titles.get(reference, reference), a.batch)))
    print(f"\nFLOPs: 2 x the multiply-adds of the convolutions and matrix products, SAME "
          f"padding's zero taps included; pools, ReLU, bias adds, the loss and the SGD update "
          f"count 0 (—). Pool rows hold both pools. \"rest\": the three ReLUs forward and "
          f"backward, the four bias gradients, softmax cross-entropy and its gradient. conv1's "
          f"input gradient is not a row: neither framework forms it. PyTorch's step has no "
          f"separate top-level row (it runs at top level). JAX rows run inside a "
          f"lax.fori_loop of R iterations, the step as core.train.local_train's scan. Max rel. "
          f"diff: max |a - b| / max |b| over each row's outputs, first pass, every other "
          f"column against {titles.get(reference, reference)} (fails above {TOLERANCE:g}); the "
          f"whole step's outputs are its loss and the params after it (its gradients can "
          f"differ more where a ReLU input lies within rounding of 0: a flipped ReLU moves one "
          f"example's share of a kernel gradient).")
    for v in vs:
        if v["kind"] == "jax":
            flags = next((r["xla_flags"] for r in runs if r["label"] == v["label"]
                          and "xla_flags" in r), "")
            ver = next((r["version"] for r in runs if r["label"] == v["label"]
                        and "version" in r), "not run")
            print(f"- {v['title']}: conv=\"{v['conv']}\", XLA_FLAGS={flags!r}, {ver}"
                  + (f", {v['python']}" if v.get("python") else ""))
        else:
            print(f"- {v['title']}: torch.set_num_threads({v['threads']}), "
                  f"OMP_NUM_THREADS={v['threads']}")
    if errors:
        print("\nErrors: " + "; ".join(errors))
    print(f"\nLoad at end: {os.getloadavg()}")
    result = dict(machine=dict(cpu=cpu_model(), cores=os.cpu_count(), child_cores=a.cores,
                               jax=version("jax"),
                               torch=version("torch"), gemm_flops_per_s=probe,
                               gemm_probes=probes),
                  variants=vs, iters=a.iters, repeats=a.repeats, runs=runs, median_s=med,
                  batch=a.batch, flops={k: a.batch * f for k, f in
                                        {**{k: f for k, (_, f) in ROWS.items()},
                                         "step": STEP_FLOPS}.items()},
                  differences=diffs, reference=reference, tolerance=TOLERANCE, errors=errors)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=float)
    return result


if __name__ == "__main__":
    main()
