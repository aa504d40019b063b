"""Each hot program against the machine's limits: FLOPs and bytes of the compiled program,
measured seconds, and the fractions of a GEMM peak and a copy bandwidth probed in the same
process.

Programs (``--programs``; synthetic stand-in data of the real shapes, recorded as such;
rounds are the runner's own compiled chunk, ``loop.run_chunk`` of one round):
  ifca_mlp          IFCA round, option II, MLP 784-200-10, m clients x n, tau full-batch steps, K
  femnist_cnn       IFCA round, FEMNIST CNN (28x28x1, 62 classes), 5 steps of batch 100, K = 4
  femnist_fedavg    FedAvg round, FEMNIST CNN, 50 writers of 160 images, 5 steps of batch 100,
                    lr 0.04, every client (the default command line's FEMNIST run)
  cifar_cnn         IFCA round, IFCA's CIFAR CNN (32x32x3), 5 steps of batch 50, K = 2
  shakespeare_lstm  IFCA round, LSTM 2 x 256 on 80-token windows, 5 steps of batch 10, K = 2
  srfca_cross_loss  SR-FCA ONE_SHOT's [N, N] cross-loss matrix (``core.oneshot.client_distances``)
  trimmed_mean, median, mean, geometric_median, krum, multi_krum, centered_clipping
                    ``core.robust``'s per-cluster aggregators of [N, d] uploads, K = 4
                    (trimmed mean beta = 0.1; ``--sort`` picks the sorting backend)
  ifca_sweep16      16 step sizes of the ifca_mlp round vmapped (``algorithms.hparams.rebuild``)
The default list leaves out cifar_cnn and the robust rules past the median.

``--devices D`` reruns the programs that walk clients in a child process with D XLA host
devices (``--xla_force_host_platform_device_count``) and the walks split over them
(``fedclust_jax.hostdevices``, as the command line runs on a CPU): one table holds both,
the split rows with the one-device program's FLOPs and bytes.

FLOPs and bytes: XLA's cost analysis (``compiled.cost_analysis()``) counts a while loop's body
once, whatever its trip count, and every round here is a scan over clients and local
steps. ``flops`` and ``bytes`` are XLA's raw figures (kept as ``xla_flops_raw``,
``xla_bytes_raw``) plus the repeats: ``hlo_costs`` recounts the compiled HLO the way XLA does
(dot / convolution / elementwise / reduce FLOPs; bytes read and written by every unfused
instruction, a fusion's sliced operands counted by the slice) once with each computation
weighted by its loops' known trip counts and once unweighted (``check_*``: equal to XLA's raw
figures but for ops it does not count, such as a sort's comparisons). Bytes are XLA's
operand + result bytes, not DRAM traffic: a client's weights reused from cache count at every
step, so a fraction of the copy bandwidth above 1 means cache-resident traffic. Each record's
``bytes_top`` (printed as "Largest byte counts") names the instructions with the most bytes
(times their loops' trips), with their result types and the source op from the metadata.

Limits, measured in the same process: ``gemm``: best f32 a @ b at 2048-4096 (GFLOP/s);
``copy``: 8 in-place passes of x + 1 over a 256 MiB float32 array in one loop, bytes read +
written (GB/s); each program is followed by a short probe and the fractions are of the best
probe of the run. On a GPU the vendor's dense TF32 / BF16 peaks and HBM bandwidth are
printed beside where the kind is known.

    python benchmarks/roofline.py [--quick] [--programs P ...] [--devices 2] [--chunk auto]
        [--conv auto] [--sort auto] [--dtype float32] [--json PATH] [--out PATH.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import median_seconds, output_file, printed_to, runner_round, synthetic_data  # noqa: E402

PROGRAMS = ("ifca_mlp", "femnist_cnn", "femnist_fedavg", "shakespeare_lstm", "srfca_cross_loss",
            "trimmed_mean", "median", "ifca_sweep16")
ROBUST = ("trimmed_mean", "median", "mean", "geometric_median", "krum", "multi_krum",
          "centered_clipping")
ALL = PROGRAMS + ("cifar_cnn",) + ROBUST[2:]
WALKS = ("ifca_mlp", "femnist_cnn", "femnist_fedavg", "cifar_cnn", "shakespeare_lstm",
         "srfca_cross_loss", "ifca_sweep16")   # programs with a walk over clients (split by --devices)
TARGETS = {"ifca_mlp": 0.70, "femnist_cnn": 0.50, "femnist_fedavg": 0.50,
           "shakespeare_lstm": 0.30}  # of GEMM, on a CPU
_ROBUST_SIZES = (dict(m=1000, d=50_000), dict(m=40, d=500))
SIZES = {"ifca_mlp": (dict(m=2400, n=100), dict(m=24, n=20)),
         "femnist_cnn": (dict(m=10, n=200, batch=100), dict(m=2, n=20, batch=10)),
         "femnist_fedavg": (dict(m=50, n=160, batch=100), dict(m=2, n=20, batch=10)),
         "cifar_cnn": (dict(m=10, n=100, batch=50), dict(m=2, n=10, batch=5)),
         "shakespeare_lstm": (dict(m=4, n=100, batch=10), dict(m=2, n=8, batch=4)),
         "srfca_cross_loss": (dict(m=100, n=600), dict(m=8, n=20)),
         "ifca_sweep16": (dict(m=96, n=100), dict(m=8, n=10)),
         **{r: _ROBUST_SIZES for r in ROBUST}}
VENDOR = {  # dense peaks: TF32 and BF16 tensor TFLOP/s, HBM TB/s (SXM parts)
    "H100": dict(tf32_tflops=494.7, bf16_tflops=989.4, hbm_tb_s=3.35),
    "H200": dict(tf32_tflops=494.7, bf16_tflops=989.4, hbm_tb_s=4.8)}

# ------------------------------------------------------------------ HLO cost, loops weighted
_DTYPE_BYTES = dict(pred=1, s8=1, u8=1, s16=2, u16=2, f16=2, bf16=2, s32=4, u32=4, f32=4,
                    s64=8, u64=8, f64=8, c64=8, c128=16)
_SHAPE = re.compile(r"\b(" + "|".join(_DTYPE_BYTES) + r")\[([\d,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.+?)\s+([a-z][\w\-]*)\((.*?)\)(.*)$")
_HEAD = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s+\(.*\{\s*$")
_ELEMENTWISE = set("add subtract multiply divide maximum minimum negate abs compare select "
                   "clamp remainder".split())   # as XLA: transcendentals are not FLOPs
_NO_BYTES = set("parameter get-tuple-element tuple constant bitcast while call conditional "
                "after-all opt-barrier partition-id replica-id iota".split())
_SLICES = ("dynamic-slice", "slice", "gather")


def _shapes(type_str):
    return [(d, [int(v) for v in dims.split(",") if v]) for d, dims in _SHAPE.findall(type_str)]


def _nbytes(type_str):
    return sum(_DTYPE_BYTES[d] * math.prod(s) for d, s in _shapes(type_str))


def _parse(text):
    comps, entry, cur = {}, None, None
    for line in text.splitlines():
        h = _HEAD.match(line)
        if h:
            cur = comps.setdefault(h.group(2), [])
            entry = h.group(2) if h.group(1) else entry
            continue
        m = _INSTR.match(line)
        if m and cur is not None:
            name, typ, op, operands, attrs = m.groups()
            cur.append(dict(name=name, type=typ, op=op, attrs=attrs, root="ROOT" in line[:8],
                            operands=re.findall(r"%([\w.\-]+)", operands),
                            number=int(operands) if op == "parameter" else None))
    return comps, entry


def _instr_flops(ins, shape_of):
    out = _shapes(ins["type"])
    n_out = math.prod(out[0][1]) if out else 0
    if ins["op"] == "dot":
        lhs = _shapes(shape_of[ins["operands"][0]])[0][1]
        dims = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins["attrs"]).group(1)
        return 2 * n_out * math.prod(lhs[int(i)] for i in dims.split(",") if i)
    if ins["op"] == "convolution":
        kernel = _shapes(shape_of[ins["operands"][1]])[0][1]
        labels = re.search(r"dim_labels=\w+_(\w+)->", ins["attrs"]).group(1)
        return 2 * n_out * math.prod(kernel) // kernel[labels.index("o")]
    if ins["op"] == "reduce":
        return math.prod(_shapes(shape_of[ins["operands"][0]])[0][1])
    return n_out if ins["op"] in _ELEMENTWISE else 0


def _fusion_bytes(ins, comps, shape_of):
    """Bytes a fusion reads and writes: an operand used only through slices counts the slices;
    an in-place dynamic-update-slice buffer counts its update, read and written."""
    body = comps[re.search(r"calls=%([\w.\-]+)", ins["attrs"]).group(1)]
    inner = {i["name"]: i for i in body}
    params = {i["number"]: i["name"] for i in body if i["op"] == "parameter"}
    total = 0
    for k, operand in enumerate(ins["operands"]):
        pname = params.get(k)
        us = [i for i in body if pname in i["operands"]]
        if us and all(u["op"] in _SLICES + ("dynamic-update-slice",)
                      and u["operands"][0] == pname for u in us):   # sliced, or updated in place
            total += sum(_nbytes(u["type"]) for u in us if u["op"] in _SLICES)
        else:
            total += _nbytes(shape_of[operand])
    root = next(i for i in body if i["root"])
    for o in ([inner[o] for o in root["operands"]] if root["op"] == "tuple" else [root]):
        total += (2 * _nbytes(inner[o["operands"][1]]["type"])
                  if o["op"] == "dynamic-update-slice" else _nbytes(o["type"]))
    return total


def hlo_costs(text, loops=True, by_instruction=None):
    """(flops, bytes, loops without a known trip count) of compiled HLO ``text``; each
    computation weighted by the trip counts of the while loops around it (``loops``).
    ``by_instruction``: a list that gets (weighted bytes, op, result type, source op name
    from the metadata) for every instruction that reads or writes memory."""
    comps, entry = _parse(text)
    callers, fused, unknown = {}, set(), 0
    for c, body in comps.items():
        for ins in body:
            n, targets = 1, re.findall(r"(?:body|condition|calls|to_apply)=%([\w.\-]+)",
                                       ins["attrs"])
            if ins["op"] == "while":
                trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', ins["attrs"])
                unknown += trip is None
                n = int(trip.group(1)) if (trip and loops) else 1
            elif ins["op"] == "fusion":
                fused.update(targets)
            elif ins["op"] not in ("call", "conditional", "async-start"):
                continue   # reduce / sort / scatter appliers: counted with their op
            if ins["op"] == "conditional":
                targets = re.findall(r"%([\w.\-]+)", ins["attrs"].split("branch_computations")[-1]
                                     .split("}")[0])
            for t in targets:
                callers.setdefault(t, []).append((c, n))
    weight = {}

    def weigh(c):
        if c not in weight:
            weight[c] = 1.0 if c == entry else sum(weigh(a) * n for a, n in callers.get(c, ()))
        return weight[c]

    for c in comps:
        weigh(c)
    flops = nbytes = 0.0
    for c, w in weight.items():
        body = comps[c] if w else ()
        shape_of = {i["name"]: i["type"] for i in body}
        for ins in body:
            flops += w * _instr_flops(ins, shape_of)
            if c in fused or ins["op"] in _NO_BYTES:
                continue
            if ins["op"] == "fusion":
                b = _fusion_bytes(ins, comps, shape_of)
            elif ins["op"] in _SLICES:
                b = 2 * _nbytes(ins["type"])
            elif ins["op"] == "dynamic-update-slice":
                b = 2 * _nbytes(shape_of[ins["operands"][1]])
            else:
                b = _nbytes(ins["type"]) + sum(_nbytes(shape_of[o]) for o in ins["operands"]
                                               if o in shape_of)
            nbytes += w * b
            if by_instruction is not None:
                source = re.search(r'op_name="([^"]*)"', ins["attrs"])
                by_instruction.append((w * b, ins["op"], ins["type"],
                                       source.group(1) if source else ""))
    return flops, nbytes, unknown


def top_bytes(items, total, n=6):
    """The n largest entries of ``hlo_costs(by_instruction=)``, each as a dict with its
    share of ``total``; the source name keeps the last two path components."""
    top = sorted(items, key=lambda t: -t[0])[:n]
    return [dict(gb=b / 1e9, share=b / total if total else 0.0, op=op, type=typ.split("{")[0],
                 source="/".join(src.split("/")[-2:])) for b, op, typ, src in top]


def cost(compiled):
    """dict: flops and bytes = XLA's raw cost analysis (a dict, or a list of dicts on some
    versions) plus what ``hlo_costs`` adds by repeating every loop body its trip count
    times; the raw figures and ``hlo_costs`` with every weight 1 (which should equal them
    but for uncounted ops such as sorts' comparisons) are kept beside."""
    ca = compiled.cost_analysis()
    ca = (ca[0] if ca else {}) if isinstance(ca, (list, tuple)) else (ca or {})
    text = compiled.as_text()
    items = []
    flops, nbytes, unknown = hlo_costs(text, by_instruction=items)
    flops1, bytes1, _ = hlo_costs(text, loops=False)
    raw_flops, raw_bytes = float(ca.get("flops", 0.0)), float(ca.get("bytes accessed", 0.0))
    return dict(flops=raw_flops + flops - flops1, bytes=raw_bytes + nbytes - bytes1,
                bytes_top=top_bytes(items, nbytes),
                xla_flops_raw=raw_flops, xla_bytes_raw=raw_bytes,
                check_flops_unweighted=flops1, check_bytes_unweighted=bytes1,
                loops_without_trip_count=unknown)



# ------------------------------------------------------------------ probes
def gemm_probe(sizes=(2048, 3072, 4096), repeats=3, dtype="float32"):
    """Best achieved FLOP/s of a @ b (n x n, ``dtype``) over ``sizes`` and ``repeats``."""
    import jax
    best = 0.0
    for n in sizes:
        a = jax.random.normal(jax.random.key(n), (n, n), dtype)
        f = jax.jit(lambda a, b: a @ b)
        best = max(best, 2 * n ** 3 / median_seconds(f, (a, a), repeats))
    return best


def copy_probe(mib=256, repeats=3, passes=8):
    """Bytes read + written per second by ``passes`` in-place passes of x + 1 over a ``mib``
    MiB float32 array inside one program (a loop, so no pass allocates or faults in pages),
    plus the copy of the input that XLA makes before the loop."""
    import jax
    import jax.numpy as jnp
    x = jnp.zeros((mib * 2 ** 18,), jnp.float32)
    f = jax.jit(lambda x: jax.lax.fori_loop(0, passes, lambda i, x: x + 1.0, x))
    return 2 * (passes + 1) * x.nbytes / median_seconds(f, (x,), repeats)


def probes(quick, again=False):
    """The limits; ``again``: the short form probed after every program."""
    import jax
    sizes, reps = ((512, 1024), 2) if quick else ((2048,), 3) if again else ((2048, 3072, 4096), 3)
    limits = dict(gemm_flops_per_s=gemm_probe(sizes, reps),
                  copy_bytes_per_s=copy_probe(32 if quick else 256, reps))
    if jax.default_backend() != "cpu":
        limits["gemm_bf16_flops_per_s"] = gemm_probe(sizes, reps, "bfloat16")
    return limits


# ------------------------------------------------------------------ programs
def _ifca(model, data, k, local, a):
    from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
    from fedclust_jax.models.base import with_dtype
    alg = IFCA(with_dtype(model, a.dtype),
               IFCAConfig(num_clusters=k, option="model", local=local, chunk=a.chunk))
    return alg, data.astype(a.dtype)


def build(name, s, a):
    """(function, args, description) of program ``name`` at sizes ``s``, options ``a``
    (chunk, conv, sort, dtype)."""
    import jax
    import jax.numpy as jnp

    from fedclust_jax.core.train import LocalTraining
    from fedclust_jax.models.mlp import mlp
    key = jax.random.key(2)
    if name in ("ifca_mlp", "ifca_sweep16"):
        alg, data = _ifca(mlp((784, 200, 10)), synthetic_data(s["m"], s["n"], (784,), 10), 4,
                          LocalTraining(steps=10, lr=0.1), a)
        what = (f"IFCA option II, MLP 784-200-10, m={s['m']}, n={s['n']}, tau=10 full batch, "
                f"K=4, chunk {a.chunk}, {a.dtype}")
        fn, args = runner_round(alg, data)
        if name == "ifca_mlp":
            return fn, args, what
        from fedclust_jax import loop
        from fedclust_jax.algorithms import hparams
        sweep = jax.vmap(lambda lr, *b: loop.run_chunk(hparams.rebuild(alg, {"lr": lr}), *b),
                         in_axes=(0, None, None, None, None))
        return sweep, (jnp.geomspace(0.01, 0.3, 16), *args), "16 step sizes vmapped, each " + what
    if name in ("femnist_cnn", "cifar_cnn", "shakespeare_lstm"):
        from fedclust_jax.models.cnn import cifar_cnn, femnist_cnn
        from fedclust_jax.models.lstm import shakespeare_lstm
        model, data, k, lr, label = {
            "femnist_cnn": lambda: (femnist_cnn(62, conv=a.conv), synthetic_data(
                s["m"], s["n"], (28, 28, 1), 62), 4, 0.04, f"FEMNIST CNN (conv {a.conv})"),
            "cifar_cnn": lambda: (cifar_cnn(10, conv=a.conv), synthetic_data(
                s["m"], s["n"], (32, 32, 3), 10), 2, 0.1, f"CIFAR CNN (conv {a.conv})"),
            "shakespeare_lstm": lambda: (shakespeare_lstm(80), synthetic_data(
                s["m"], s["n"], (80,), 80, tokens=True), 2, 0.8,
                "LSTM 2x256, 80-token windows")}[name]()
        alg, data = _ifca(model, data, k, LocalTraining(5, lr, batch_size=s["batch"]), a)
        fn, args = runner_round(alg, data)
        return fn, args, (f"IFCA option II, {label}, m={s['m']}, n={s['n']}, 5 steps of batch "
                          f"{s['batch']}, K={k}, chunk {a.chunk}, {a.dtype}")
    if name == "femnist_fedavg":
        from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
        from fedclust_jax.models.base import with_dtype
        from fedclust_jax.models.cnn import femnist_cnn
        alg = FedAvg(with_dtype(femnist_cnn(62, conv=a.conv), a.dtype),
                     FedAvgConfig(local=LocalTraining(5, 0.04, batch_size=s["batch"]),
                                  chunk=a.chunk))
        data = synthetic_data(s["m"], s["n"], (28, 28, 1), 62).astype(a.dtype)
        fn, args = runner_round(alg, data)
        return fn, args, (f"FedAvg, FEMNIST CNN (conv {a.conv}), m={s['m']}, n={s['n']}, 5 steps "
                          f"of batch {s['batch']}, lr 0.04, every client, chunk {a.chunk}, {a.dtype}")
    if name == "srfca_cross_loss":
        from fedclust_jax.core.oneshot import client_distances
        model = mlp((784, 200, 10))
        local = jax.vmap(model.init)(jax.random.split(key, s["m"]))
        fn = lambda p, d: client_distances(model, p, d, "cross_loss", chunk=a.chunk)
        return fn, (local, synthetic_data(s["m"], s["n"], (784,), 10)), (
            f"[N, N] cross-loss of N={s['m']} MLP 784-200-10 client models, n={s['n']} each, "
            f"chunk {a.chunk}")
    from fedclust_jax.core import robust as R
    sort = dict(method=a.sort)
    fn = {"trimmed_mean": lambda v, g, p: R.cluster_trimmed_mean(v, g, p, 0.1, **sort),
          "median": lambda v, g, p: R.cluster_median(v, g, p, **sort),
          "mean": R.cluster_plain_mean,
          "geometric_median": lambda v, g, p: R.cluster_geometric_median(v, g, p, iters=10),
          "krum": lambda v, g, p: R.cluster_krum(v, g, p, byz_frac=0.1),
          "multi_krum": lambda v, g, p: R.cluster_krum(v, g, p, byz_frac=0.1, multi=True),
          "centered_clipping": lambda v, g, p: R.cluster_centered_clipping(v, g, p, tau=1.0)}[name]
    values = jax.random.normal(key, (s["m"], s["d"]))
    assign = jax.random.randint(jax.random.key(3), (s["m"],), 0, 4)
    what = {"trimmed_mean": "beta 0.1, ", "geometric_median": "10 Weiszfeld steps, ",
            "krum": "byzantine fraction 0.1, ", "multi_krum": "byzantine fraction 0.1, ",
            "centered_clipping": "tau 1, 1 step, "}.get(name, "")
    sorted_ = f", {a.sort} sort" if name in ("trimmed_mean", "median") else ""
    return fn, (values, assign, jnp.zeros((4, s["d"]))), (
        f"per-cluster {name.replace('_', ' ')}, {what}N={s['m']}, d={s['d']}, K=4{sorted_}")


def measure(name, s, a):
    import jax
    fn, args, what = build(name, s, a)
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    rec = dict(program=name, what=what, data="synthetic stand-in of the real shapes",
               sizes=s, compile_s=time.perf_counter() - t0, devices=jax.device_count(),
               **cost(compiled))
    rec["seconds"] = median_seconds(compiled, args, a.repeats)
    return rec


def against(rec, limits):
    """``rec`` with its rates and their fractions of ``limits``."""
    rec.update(limits, flops_per_s=rec["flops"] / rec["seconds"],
               bytes_per_s=rec["bytes"] / rec["seconds"],
               memory_floor_s=rec["bytes"] / limits["copy_bytes_per_s"],
               gemm_floor_s=rec["flops"] / limits["gemm_flops_per_s"])
    rec["fraction_of_gemm_peak"] = rec["flops_per_s"] / limits["gemm_flops_per_s"]
    rec["fraction_of_bandwidth"] = rec["bytes_per_s"] / limits["copy_bytes_per_s"]
    return rec


def machine(limits):
    import jax
    kind = getattr(jax.devices()[0], "device_kind", "")
    vendor = next((v for k, v in VENDOR.items() if k in kind), None)
    return dict(backend=jax.default_backend(), device=kind, devices=jax.device_count(),
                processor=platform.processor() or platform.machine(), cpus=os.cpu_count(),
                jax_version=jax.__version__, vendor_peak=vendor, **limits)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a test, CI)")
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=ALL)
    p.add_argument("--chunk", default="auto", help="client layout: auto, none or an int >= 1")
    p.add_argument("--conv", default="auto", choices=("auto", "native", "patches"),
                   help="convolution of the CNNs (models.cnn)")
    p.add_argument("--sort", default="auto", choices=("auto", "packed", "masked", "numpy"),
                   help="sorting backend of the median and trimmed mean (core.robust)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="storage of the rounds' params and data")
    p.add_argument("--repeats", type=int, default=3, help="timed calls after a warm-up")
    p.add_argument("--devices", type=int, default=0, metavar="D",
                   help="also time the client-walking programs in a child process with D "
                        "host devices, the walks split over them")
    p.add_argument("--json", type=output_file, default=None, help="write the records here")
    p.add_argument("--out", type=output_file, default=None, help="also write the table here")
    p.add_argument("--split", action="store_true", help=argparse.SUPPRESS)   # the child
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats must be >= 1, got {a.repeats}")
    if a.chunk not in ("auto", "none") and not a.chunk.isdigit() or a.chunk == "0":
        p.error(f"--chunk must be auto, none or a positive number of clients, got {a.chunk}")
    if a.devices == 1 or a.devices < 0:
        p.error(f"--devices must be 0 (none) or >= 2, got {a.devices}")
    a.chunk = {"auto": "auto", "none": None}[a.chunk] if not a.chunk.isdigit() else int(a.chunk)
    if a.split:
        from fedclust_jax.hostdevices import split_over_host_devices
        with split_over_host_devices():
            return table(a)
    with printed_to(a.out, __file__):
        return table(a)


def split_records(a, records):
    """The client-walking programs of ``records`` timed again in a child process with
    ``a.devices`` host devices (walks split), with the one-device FLOPs and bytes."""
    names = [r["program"] for r in records if r["program"] in WALKS]
    if not names:
        return []
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={a.devices}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--split", "--programs", *names, "--json",
               f"{tmp}/r.json", "--repeats", str(a.repeats), "--chunk", str(a.chunk).lower(),
               "--conv", a.conv, "--dtype", a.dtype] + ["--quick"] * a.quick
        subprocess.run(cmd, env=dict(os.environ, XLA_FLAGS=flags), check=True,
                       stdout=subprocess.DEVNULL)
        with open(f"{tmp}/r.json") as f:
            split = json.load(f)["records"]
    one = {r["program"]: r for r in records}
    for r in split:
        for k in ("flops", "bytes", "xla_flops_raw", "xla_bytes_raw"):
            r[k] = one[r["program"]][k]
        r["what"] += f"; walks split over {r['devices']} host devices"
    return split


def table(a):
    """Probes, then each program followed by a short probe; every fraction is of the best
    probe of the run (so a probe taken while the machine was busier never flatters)."""
    history = [probes(a.quick)]
    print(f"load at start {os.getloadavg()}", flush=True)
    records = []
    for name in a.programs:
        r = measure(name, SIZES[name][1 if a.quick else 0], a)
        r["load_after"] = os.getloadavg()
        records.append(r)
        history.append(probes(a.quick, again=True))
        print(f"{name}: {r['seconds']:.3f} s, load after {r['load_after']}", flush=True)
    limits = {k: max(h[k] for h in history) for k in history[0]}
    info = machine(limits)
    split = split_records(a, records) if a.devices and not a.split else []
    if split:   # fractions of the best probe of either process
        limits = {k: max(limits[k], split[0][k]) for k in limits}
    for r in records + split:
        against(r, limits).update({k: v for k, v in info.items() if k != "devices"},
                                  **({} if r in split else dict(probes=history)))
    print(f"\n{info['backend']} ({info['device']}, {info['processor']}, {info['cpus']} cores, "
          f"{info['devices']} device(s)), jax {info['jax_version']}: best of {len(history)} "
          f"probes: GEMM (f32) {limits['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s (all: "
          + ", ".join(f"{h['gemm_flops_per_s'] / 1e9:.1f}" for h in history)
          + f"), copy {limits['copy_bytes_per_s'] / 1e9:.1f} GB/s (all: "
          + ", ".join(f"{h['copy_bytes_per_s'] / 1e9:.1f}" for h in history) + ")"
          + (f", bf16 GEMM {limits['gemm_bf16_flops_per_s'] / 1e12:.1f} TFLOP/s"
             if "gemm_bf16_flops_per_s" in limits else ""))
    if info["vendor_peak"]:
        v = info["vendor_peak"]
        print(f"Vendor peaks ({info['device']}): TF32 {v['tf32_tflops']} TFLOP/s, BF16 "
              f"{v['bf16_tflops']} TFLOP/s dense, HBM {v['hbm_tb_s']} TB/s")
    print("\n| program | devices | GFLOP | GB | s | GEMM floor s | memory floor s | GFLOP/s | GB/s "
          "| of GEMM peak | of copy bandwidth | XLA raw GFLOP / GB (loop bodies once) | load after |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in sorted(records + split, key=lambda r: (a.programs.index(r["program"]), r["devices"])):
        print(f"| {r['program']} | {r['devices']} | {r['flops'] / 1e9:.2f} | "
              f"{r['bytes'] / 1e9:.2f} | {r['seconds']:.3f} | {r['gemm_floor_s']:.3f} | "
              f"{r['memory_floor_s']:.3f} | {r['flops_per_s'] / 1e9:.1f} | "
              f"{r['bytes_per_s'] / 1e9:.1f} | {r['fraction_of_gemm_peak']:.2f} | "
              f"{r['fraction_of_bandwidth']:.2f} | {r['xla_flops_raw'] / 1e9:.3f} / "
              f"{r['xla_bytes_raw'] / 1e9:.3f} | {r['load_after'][0]:.2f} |", flush=True)
    print("\nPrograms (synthetic stand-in data of the real shapes):")
    for r in records:
        print(f"- {r['program']}: {r['what']}")
    print("\nLargest byte counts (instruction x loop trips; share of the program's recounted "
          "bytes):")
    for r in records:
        print(f"- {r['program']}: " + "; ".join(
            f"{t['op']} {t['type']} ({t['source'] or '-'}) {t['gb']:.2f} GB, {t['share']:.0%}"
            for t in r["bytes_top"][:4]))
    if info["backend"] == "cpu" and not a.quick:
        for name, target in TARGETS.items():
            best = max((r["fraction_of_gemm_peak"] for r in records + split
                        if r["program"] == name), default=None)
            if best is not None:
                print(f"- target: {name} at >= {target:.2f} of the GEMM peak: best "
                      f"{best:.2f} ({'met' if best >= target else 'not met'})")
    print(f"\nLoad at end: {os.getloadavg()}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(machine=info, records=records + split), f, indent=1)
    return records + split


if __name__ == "__main__":
    main()
