"""`fedclust-jax`: run one algorithm or compare several on the same data and seeds."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import shlex
import signal
import sys
import threading
import tomllib

from fedclust_jax.hostdevices import force_host_devices, split_over_host_devices

if os.path.basename(sys.argv[0]) == "fedclust-jax":   # the program: before JAX starts
    force_host_devices()
from fedclust_jax.algorithms.registry import ALGORITHMS, accepted_params
from fedclust_jax.config_check import CliText
from fedclust_jax.presets import DEFAULT_PRESET, PRESETS, dataset_study, preset
from fedclust_jax.tracking import add_log_argument, loggers as check_loggers

EPILOG = """\
examples:
  fedclust-jax compare                      # FedAvg, Local and IFCA on the IFCA synthetic mixture
  fedclust-jax compare --preset mixture-classification --rounds 20
  fedclust-jax run --algorithm ifca --clusters 2 --lr 0.1 --set option=gradient --restarts 10
  fedclust-jax compare --config my_study.toml --output results.json
  fedclust-jax compare --dataset femnist --data-dir /path/to/data   # the paper's CNN and settings
  fedclust-jax list                         # datasets, models, algorithms, presets
  fedclust-jax list ifca                    # its parameters: default, type, meaning
  fedclust-jax sweep --config study.toml --output results.csv   # seeds x parameters grid

plugins: --plugin FILE.py (repeatable, anywhere on the line) or FEDCLUST_PLUGINS=a.py:b.py
import files that register algorithms, datasets or models (docs/extending.md).

config files (JSON or TOML) hold a study: dataset, data {...}, model, model_args {...},
rounds, seed, restarts, and algorithms {label: {param: value, algorithm: name, restarts: R,
rounds: T}}.
"""


def parse_pairs(pairs: list[str] | None, flag: str) -> dict:
    """['k=v', ...] -> {k: CliText(v)}: each value is converted to the type its key expects
    (``config_check``)."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"{flag} takes KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        if not key.strip():
            raise ValueError(f"{flag} takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = CliText(value.strip())
    return out


def load_config(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            study = tomllib.load(f) if path.endswith(".toml") else json.load(f)
    except FileNotFoundError:
        raise ValueError(f"config file {path!r} not found") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path!r} is a folder; give a .toml or .json file") from None
    except OSError as e:
        raise ValueError(f"config file {path!r} cannot be read ({e.strerror or e})") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        kind = "TOML" if path.endswith(".toml") else "JSON"
        raise ValueError(f"config file {path!r} is not valid {kind}: {e}") from None
    if not isinstance(study, dict):
        raise ValueError(f"config file {path!r} must hold a table (dataset, data, rounds, "
                         f"algorithms, ...), got {type(study).__name__}")
    if not study:
        raise ValueError(f"config file {path!r} is empty; a study names its dataset and "
                         "algorithms, e.g. dataset = \"gaussian-mixture\" and "
                         "[algorithms.fedavg] (README.md, Study files)")
    return study


SHARED_FLAGS = (("clusters", "num_clusters"), ("lr", "lr"), ("local_steps", "steps"),
                ("batch_size", "batch_size"), ("participation", "participation"),
                ("option", "option"), ("chunk", "chunk"))


def base_study(args, names: list[str] | None) -> dict:
    """The study before command-line overrides: a config file, a dataset's defaults
    (``--dataset``), or a preset (default ``ifca-synthetic``)."""
    if args.config:
        study = load_config(args.config)
        if args.dataset is not None and args.dataset != study.get("dataset"):
            # the file's data and model belong to its dataset; take the new dataset's
            defaults = dataset_study(args.dataset, [])
            study.update({k: defaults[k] for k in ("dataset", "data", "model", "model_args")})
        return study
    if args.dataset is not None:
        if args.preset is not None and PRESETS[args.preset] != args.dataset:
            raise ValueError(f"--preset {args.preset} is a study of {PRESETS[args.preset]!r}, not "
                             f"{args.dataset!r}; drop --preset to get {args.dataset}'s own defaults")
        return dataset_study(args.dataset, names)
    study = preset(args.preset or DEFAULT_PRESET)
    if names is not None:
        study = dataset_study(study["dataset"], names)
    return study


def build_study(args, *, single: bool) -> dict:
    """The study to run: config file, dataset defaults or preset, then command-line
    overrides (values typed on the command line stay ``CliText`` until checked)."""
    chosen = args.algorithm if single else args.algorithms
    names = None
    if chosen:
        names = [chosen] if single else [a.strip() for a in chosen.split(",") if a.strip()]
        if not names:
            raise ValueError("--algorithms needs at least one name, e.g. --algorithms fedavg,ifca")
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:
            raise ValueError(f"--algorithms names {twice!r} twice; name each once (to run one "
                             f"algorithm twice, give a study file two labels, e.g. "
                             f"[algorithms.{twice}-b] with algorithm = \"{twice}\")")
        unknown = [n for n in names if n not in ALGORITHMS]
        if unknown and not args.config:
            raise ValueError(f"unknown algorithm {unknown[0]!r}; available: {', '.join(sorted(ALGORITHMS))}")
    study = base_study(args, names)
    for name in ("rounds", "seed", "eval_every"):
        if getattr(args, name) is not None:
            study[name] = getattr(args, name)
    if args.dtype is not None:
        study["dtype"] = args.dtype
    study["data"] = dict(study.get("data") or {}) if isinstance(study.get("data", {}), dict) else study["data"]
    if isinstance(study["data"], dict):
        study["data"].update(parse_pairs(args.data, "--data"))
        if args.data_dir is not None:
            from fedclust_jax.data.registry import DATASETS
            dataset = study.get("dataset", "synthetic-regression")
            if dataset in DATASETS and "data_dir" not in inspect.signature(DATASETS[dataset]).parameters:
                raise ValueError(f"--data-dir: dataset {dataset!r} reads no files (it is made "
                                 "in memory); drop --data-dir")
            study["data"]["data_dir"] = args.data_dir
    if args.model is not None and args.model != study.get("model"):
        study["model"] = args.model
        study["model_args"] = {}  # the default's arguments belong to the default model
    if isinstance(study.get("model_args", {}), dict):
        study["model_args"] = dict(study.get("model_args") or {})
        study["model_args"].update(parse_pairs(args.model_arg, "--model-arg"))

    known = study.get("algorithms") or {}
    if not isinstance(known, dict):
        raise ValueError(f"'algorithms' must be a table {{label: {{parameter: value}}}}, got {known!r}")
    if names is not None and args.config:
        missing = [n for n in names if n not in known and n not in ALGORITHMS]
        if missing:
            raise ValueError(f"unknown algorithm {missing[0]!r}; the study has {sorted(known)}, "
                             f"available: {', '.join(sorted(ALGORITHMS))}")
        study["algorithms"] = {n: dict(known.get(n) or {}) for n in names}
    elif not known:
        raise ValueError(f"the study names no algorithm; add a table such as "
                         f"[algorithms.fedavg] to {args.config or 'it'} or pass "
                         + ("--algorithm NAME" if single else "--algorithms A,B")
                         + " (see `fedclust-jax list`)")
    elif single and len(known) != 1:
        raise ValueError(f"`run` runs one algorithm and the study has {len(known)} "
                         f"({', '.join(known)}); pass --algorithm LABEL, e.g. --algorithm "
                         f"{next(iter(known))}, or use `compare` to run them all")
    labels = study["algorithms"]
    for label, params in labels.items():
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"algorithms.{label} must be a table {{parameter: value}}, got {params!r}")
        labels[label] = dict(params or {})
    if args.restarts is not None:
        for params in labels.values():
            params["restarts"] = args.restarts

    def accepts(label, key):
        name = labels[label].get("algorithm", label)
        if name not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}")
        return key in accepted_params(name)
    for flag, key in SHARED_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            targets = [l for l in labels if accepts(l, key)]
            if not targets:
                raise ValueError(f"--{flag.replace('_', '-')} applies to none of {sorted(labels)}")
            for l in targets:
                labels[l][key] = value
    for key, value in parse_pairs(args.set, "--set").items():
        if "." in key:
            label, key = key.split(".", 1)
            if label not in labels:
                raise ValueError(f"--set {label}.{key}: no algorithm {label!r} in {sorted(labels)}")
            if key not in ("restarts", "rounds") and not accepts(label, key):
                name = labels[label].get("algorithm", label)
                raise ValueError(f"--set {label}.{key}: algorithm {name!r} has no parameter {key!r}; "
                                 f"it takes {', '.join(accepted_params(name))}")
            labels[label][key] = value
        else:
            targets = [l for l in labels if accepts(l, key)]
            if not targets:
                raise ValueError(f"--set {key}: no algorithm in {sorted(labels)} takes {key!r}")
            for l in targets:
                labels[l][key] = value
    return study


def add_common(p: argparse.ArgumentParser):
    g = p.add_argument_group("what to run")
    g.add_argument("--preset", choices=sorted(PRESETS), help=f"named study (default {DEFAULT_PRESET})")
    g.add_argument("--config", help="study file (.json or .toml); replaces the preset")
    g.add_argument("--dataset", help="dataset name (see `fedclust-jax list`); brings the model and "
                                     "settings it declares (`fedclust-jax list NAME`), not the preset's")
    g.add_argument("--data", action="append", metavar="KEY=VALUE", help="dataset parameter (repeatable), e.g. --data num_clients=400")
    g.add_argument("--data-dir", help="directory holding downloaded datasets (else $FEDCLUST_DATA)")
    g.add_argument("--model", help="model name (default: the dataset's paper model, see `fedclust-jax list DATASET`)")
    g.add_argument("--model-arg", action="append", metavar="KEY=VALUE", help="model parameter (repeatable), e.g. --model-arg hidden=[200]")
    g = p.add_argument_group("schedule")
    g.add_argument("--rounds", type=CliText, help="communication rounds (default: the dataset's)")
    g.add_argument("--seed", type=CliText, help="root random seed (data and algorithms)")
    g.add_argument("--restarts", type=CliText, help="random initialisations run as a batch; the one with the lowest training objective is reported")
    add_eval_every(g)
    g = p.add_argument_group("algorithm parameters (applied to every chosen algorithm that has them)")
    g.add_argument("--clusters", type=CliText, help="number of cluster models K")
    g.add_argument("--lr", type=CliText, help="step size gamma")
    g.add_argument("--local-steps", type=CliText, help="local steps tau per round")
    g.add_argument("--batch-size", type=CliText, help="minibatch size (default: the dataset's; none = full batch)")
    g.add_argument("--participation", type=CliText, help="fraction of clients per round, in (0, 1]")
    g.add_argument("--option", choices=["gradient", "model"], help="IFCA option I (gradient) or II (model averaging)")
    g.add_argument("--chunk", type=CliText, help="client layout: auto (default: chosen per backend), none (one vmap) or clients per chunk (bounds memory)")
    g.add_argument("--set", action="append", metavar="[ALG.]KEY=VALUE", help="any algorithm parameter (repeatable); ALG. limits it to one algorithm")
    g = p.add_argument_group("execution")
    g.add_argument("--checkpoint", help="checkpoint file (.npz) saved every --checkpoint-every and after "
                                        "the last round, resumed from when it exists (several algorithms: "
                                        "one file each, <stem>-<label>.npz; an ended one is not rerun)")
    add_checkpoint_every(g)
    g.add_argument("--dtype", help="storage of params and data: float32 (default) or bfloat16 "
                   "(losses, aggregates and optimizer state stay float32)")
    g.add_argument("--devices", type=CliText, help="split the clients over this many devices (default one)")
    g = p.add_argument_group("output")
    g.add_argument("--output", help="write results (command, config, metrics, history) to this JSON file: "
                                    "run writes one result object, compare a list of them; a file that "
                                    "is not run / compare results is kept and they go to <stem>-<n>.json")
    g.add_argument("--save-state", metavar="FILE", help="write the chosen restart's final state "
                   "(cluster models, assignment, per-client test metrics) to this .npz (several "
                   "algorithms: <stem>-<label>.npz); fedclust_jax.load_trained(FILE) reads it "
                   "back (format: fedclust_jax/trained.py)")
    g.add_argument("--overwrite", action="store_true", help="replace --output or --save-state "
                   "whatever made it")
    g.add_argument("--no-progress", action="store_true", help="no progress reports (they go to stderr at "
                                                               "least every 10 s, or every round)")
    add_log_argument(g)


def add_checkpoint_every(g):
    g.add_argument("--checkpoint-every", metavar="60s|50r",
                   help="how often --checkpoint is saved: seconds of wall time (60s, the default) "
                        "or rounds (50r); an interrupt loses at most that much")


def add_eval_every(g):
    g.add_argument("--eval-every", type=CliText, metavar="E",
                   help="record test accuracy/loss, cluster count and sizes, misclustering and ARI "
                        "every E rounds inside the compiled loop: the results' \"curves\" (default: off)")


class OneLineErrors(argparse.ArgumentParser):
    """argparse with usage errors on one line (exit code 2, no usage dump)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="fedclust-jax", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="JAX simulator of clustered and Byzantine-robust federated learning.",
        epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=OneLineErrors)
    run = sub.add_parser("run", help="run one algorithm and print its metrics",
                         description="Run one algorithm; prints a table and optionally writes JSON.")
    run.add_argument("--algorithm", help="algorithm name (see `fedclust-jax list`)")
    add_common(run)
    cmp_ = sub.add_parser("compare", help="run several algorithms on the same data and seed",
                          description="Run several algorithms on the same data and seed; prints one table "
                                      "(accuracy or loss, misclustering, ARI, parameter error, wall time).")
    cmp_.add_argument("--algorithms", help="comma-separated algorithm names (default: the preset's or the dataset's list)")
    add_common(cmp_)
    swp = sub.add_parser("sweep", help="run a study's [sweep] grid (seeds x parameters) as few compiled programs",
                         description="Run the grid of a study's [sweep] table ({path: [values]}, product "
                                     "or mode = \"zip\"); seeds and traced hyperparameters are vmapped in "
                                     "one program, static values make separate programs. Prints one row "
                                     "per (algorithm, point, seed); --output writes them as CSV or JSON.")
    swp.add_argument("--config", required=True, help="study file (.toml or .json) with a [sweep] table")
    add_eval_every(swp)
    swp.add_argument("--output", help="write the rows to this .csv (curves JSON-encoded in one column) "
                                      "or .json file, rewritten as points end; a file that is not "
                                      "sweep rows is kept and they go to <stem>-<n>.csv / .json")
    swp.add_argument("--overwrite", action="store_true", help="replace --output whatever made it")
    swp.add_argument("--checkpoint", metavar="DIR", help="folder where every program saves its points' "
                     "state every --checkpoint-every and ended points their rows; rerunning the same "
                     "command skips what ended and resumes the rest")
    add_checkpoint_every(swp)
    swp.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    add_log_argument(swp)
    lst = sub.add_parser("list", help="list datasets, models, algorithms and presets; "
                                      "`list NAME`: its parameters with defaults, types and meanings")
    lst.add_argument("name", nargs="?", help="an algorithm, dataset, model or preset")
    from fedclust_jax.plot import add_plot_parser  # `plot`: matplotlib imported only to draw
    add_plot_parser(sub)
    from fedclust_jax import reproduce
    reproduce.add_arguments(sub.add_parser(
        "reproduce", help="reproduce a paper's table or figure from its study file",
        description="Run a paper table's study file (fedclust_jax/studies/<paper>/, shipped "
                    "with the package) and write it beside the paper's numbers; --list names "
                    "the tables."))
    return parser


def _show(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, tuple):
        return str(list(v))
    return str(v)


def _type_name(annotation, default) -> str:
    from fedclust_jax.config_check import type_text
    if annotation is None and default is None:
        return "path or none"
    return type_text(annotation, default)


def _clip(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3].rsplit(" ", 1)[0] + " ..."


def _param_lines(fields: dict, docs: dict) -> list[str]:
    from dataclasses import MISSING
    rows = [(k, _show(d) if d is not MISSING else "(required)", _type_name(a, d), docs.get(k, ""))
            for k, (a, d) in fields.items()]
    w0 = max([len(r[0]) for r in rows] + [9])
    w1 = max([len(r[1]) for r in rows] + [7])
    w2 = max([len(r[2]) for r in rows] + [4])
    out = [f"  {'parameter':{w0}}  {'default':{w1}}  {'type':{w2}}  meaning"]
    out += [f"  {k:{w0}}  {d:{w1}}  {t:{w2}}  {_clip(m)}" for k, d, t, m in rows]
    return out


def _meaning_lines(fields: dict, docs: dict, owner: str) -> list[str]:
    """The parameter table; an undescribed parameter says where its meaning belongs."""
    missing = [k for k in fields if not docs.get(k)]
    docs = {**docs, **{k: "(undescribed)" for k in missing}}
    lines = _param_lines(fields, docs)
    if missing:
        lines.append(f"  undescribed: {', '.join(missing)}: add `name: meaning` entries to "
                     f"{owner}'s docstring")
    return lines


def describe_algorithm(name: str) -> str:
    from fedclust_jax.algorithms.registry import field_docs, param_fields
    cls = ALGORITHMS[name].config_cls
    lines = [f"algorithm {name}: {ALGORITHMS.help.get(name, '')}",
             f"  set with --set KEY=VALUE (or --set {name}.KEY=VALUE), or in a study file"]
    lines += _meaning_lines(param_fields(cls), field_docs(cls), cls.__qualname__)
    lines.append("  also: restarts (random initialisations, best training objective reported), "
                 "rounds (per algorithm in a study file)")
    return "\n".join(lines)


def describe_dataset(name: str) -> str:
    from fedclust_jax.config_check import signature_fields
    from fedclust_jax.data.registry import DATASETS
    from fedclust_jax.data.sources import ENV_VAR, resolve_data_dir
    from fedclust_jax.describe import meanings
    from fedclust_jax.presets import dataset_defaults
    fn = DATASETS[name]
    fields, _ = signature_fields(fn)
    lines = [f"dataset {name}: {_clip(DATASETS.help.get(name, ''), 200)}",
             "  parameters (--data KEY=VALUE):"]
    lines += _meaning_lines(fields, meanings(fn.__doc__, fields), fn.__qualname__)
    if "data_dir" in fields:
        root = resolve_data_dir(None)
        where = (f"${ENV_VAR} = {root}" if root is not None else f"${ENV_VAR} is unset")
        lines.append(f"  data is looked for in --data-dir or ${ENV_VAR} (now: {where}): "
                     f"<root>/<name>/ then <root>/; see fedclust_jax/data/sources.py")
    else:
        lines.append("  no files needed (generated, or bundled with scikit-learn)")
    entry = dataset_defaults(name)
    if entry.unsupported:
        lines.append(f"  not for run/compare: {entry.unsupported}")
        return "\n".join(lines)
    lines.append(f"  defaults with --dataset {name}: model {entry.model or '(task default)'}"
                 + (f" {entry.model_args}" if entry.model_args else "")
                 + f", rounds {entry.rounds}, data {entry.data or '(builder defaults)'}")
    lines.append(f"    training (every algorithm that takes it): {entry.training or '(none)'}")
    for alg, params in entry.algorithms.items():
        lines.append(f"    {alg}: {params or '(training settings only)'}")
    lines.append(f"    source: {entry.source}")
    return "\n".join(lines)


def describe_model(name: str) -> str:
    from fedclust_jax.describe import meanings
    from fedclust_jax.models.registry import MODELS
    from fedclust_jax.registry_check import model_fields
    fn = MODELS[name]
    fields, _ = model_fields(name)
    lines = [f"model {name}: {_clip(MODELS.help.get(name, ''), 200)}",
             "  parameters (--model-arg KEY=VALUE):"]
    lines += (_meaning_lines(fields, meanings(fn.__doc__, fields), fn.__qualname__)
              if fields else ["  (none)"])
    return "\n".join(lines)


def list_everything(name: str | None = None) -> str:
    from fedclust_jax.data.registry import DATASETS
    from fedclust_jax.models.registry import MODELS
    if name is not None:
        if name in ALGORITHMS:
            return describe_algorithm(name)
        if name in DATASETS:
            return describe_dataset(name)
        if name in MODELS:
            return describe_model(name)
        if name in PRESETS:
            study = preset(name)
            return (f"preset {name}: dataset {PRESETS[name]}, algorithms {', '.join(study['algorithms'])}"
                    f"\n\n{describe_dataset(PRESETS[name])}")
        raise ValueError(f"nothing called {name!r}; `fedclust-jax list` shows the algorithms, "
                         "datasets, models and presets")
    lines = ["datasets (`list NAME` for parameters and defaults):"]
    lines += [f"  {n:24s} {_clip(DATASETS.help.get(n, ''), 90)}" for n in sorted(DATASETS)]
    lines.append("models:")
    lines += [f"  {n:24s} {_clip(MODELS.help.get(n, ''), 90)}" for n in sorted(MODELS)]
    lines.append("algorithms (`list NAME` for parameters, defaults, types and meanings):")
    lines += [f"  {n:24s} {_clip(ALGORITHMS.help.get(n, ''), 90)}" for n in sorted(ALGORITHMS)]
    lines.append("presets:")
    for n, ds in sorted(PRESETS.items()):
        lines.append(f"  {n:24s} {ds}: {', '.join(preset(n)['algorithms'])}")
    return "\n".join(lines)


def check_paths(args, labels: list[str]) -> str | None:
    """--output, --save-state and --checkpoint must be writable files (folders are created),
    no two of them on one path, before any compute starts; a checkpoint that exists must be
    a fedclust_jax checkpoint.
    Returns where --output goes (``results.output_target``: a file fedclust-jax did not
    write as results is kept, unless --overwrite)."""
    from fedclust_jax.experiment import checkpoint_paths
    from fedclust_jax.results import check_output_path, distinct_outputs
    distinct_outputs([("--output", args.output, [args.output] if args.output else [])]
                     + [(flag, getattr(args, name), list(checkpoint_paths(getattr(args, name),
                                                                         labels).values()))
                        for flag, name in (("--checkpoint", "checkpoint"),
                                           ("--save-state", "save_state"))
                        if getattr(args, name)])
    target = None
    if args.output:
        target = check_output_path(args.output, "--output", kind="results",
                                   overwrite=args.overwrite)
    if args.save_state:
        for label, path in checkpoint_paths(args.save_state, labels).items():
            check_output_path(path, "--save-state", example="state.npz", kind="trained",
                              overwrite=args.overwrite)
    if args.checkpoint:
        for path in checkpoint_paths(args.checkpoint, labels).values():
            if os.path.isdir(path) or not os.path.exists(path):
                check_output_path(path, "--checkpoint", example="ck.npz")
            elif not os.access(path, os.R_OK | os.W_OK):
                raise ValueError(f"--checkpoint {path!r} exists but cannot be read and written")
            else:  # resumed from: it must be a fedclust_jax checkpoint (read without pickle)
                from fedclust_jax.checkpoint import read_meta
                read_meta(path)
    return target


def checkpoint_cadence(args):
    """The --checkpoint-every cadence (``progress.Cadence``), None when not given; without
    --checkpoint it is refused (it would do nothing)."""
    from fedclust_jax.progress import Cadence
    if args.checkpoint_every is None:
        return None
    if not args.checkpoint:
        raise ValueError(f"--checkpoint-every {args.checkpoint_every} needs --checkpoint (it says "
                         f"how often the checkpoint is saved)")
    return Cadence.parse(args.checkpoint_every)


def error(message) -> int:
    print(f"fedclust-jax: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


class RunState:
    """What the command is doing, for the line printed on an interrupt: the algorithm
    running (None before the first one starts), each algorithm's checkpoint path and a
    sweep's or table's --checkpoint folder."""

    def __init__(self):
        self.command, self.label, self.checkpoints = None, None, {}
        self.sweep_checkpoint = None


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def interrupt_signals():
    """SIGINT and SIGTERM raise KeyboardInterrupt while the command runs (the previous
    handlers come back after; a signal the parent process ignores stays ignored). One that
    lands where Python cannot raise (a garbage-collection callback) is raised at the next
    progress report instead (``progress.raise_lost_interrupt``). Off the main thread
    signals cannot be handled and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from fedclust_jax import progress
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s, handler in ((signal.SIGINT, signal.default_int_handler),
                       (signal.SIGTERM, _raise_interrupt)):
        if previous[s] is not signal.SIG_IGN:   # a signal ignored by the parent stays so
            signal.signal(s, handler)
    hook = sys.unraisablehook

    def swallowed(unraisable):   # an interrupt landing in a gc callback: raised at the next report
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            progress.interrupt_lost()
        else:
            hook(unraisable)
    sys.unraisablehook = swallowed
    try:
        yield
    finally:
        sys.unraisablehook = hook
        progress.clear_lost_interrupt()
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _checkpoint_round(path: str) -> int | None:
    """The round the checkpoint at ``path`` holds; None when there is no readable one."""
    from fedclust_jax.checkpoint import read_meta
    try:
        return read_meta(path)["rounds_done"] if os.path.exists(path) else None
    except ValueError:
        return None


def interrupt_line(exc: KeyboardInterrupt, state: RunState) -> str:
    """The one line printed on Ctrl-C or SIGTERM: ``RunInterrupted.line()`` when the
    runner says where it stopped, else what the command knows (the checkpoint's round)."""
    from fedclust_jax.progress import RunInterrupted
    if isinstance(exc, RunInterrupted):
        if exc.checkpoint is not None:   # the file is the truth: an interrupt during the
            held = _checkpoint_round(exc.checkpoint)   # save may land after its rename
            if held is not None:   # and rounds saved were completed
                exc.checkpoint_round, exc.round = held, max(exc.round, held)
        return exc.line()
    if state.command in ("sweep", "reproduce"):
        what = "a sweep" if state.command == "sweep" else "a table"
        if state.sweep_checkpoint is None:
            return (f"fedclust-jax: {state.command} interrupted outside a run's rounds; no "
                    f"checkpoint was asked for (add --checkpoint DIR to make {what} resumable)")
        return (f"fedclust-jax: {state.command} interrupted outside a run's rounds; "
                f"{state.sweep_checkpoint} keeps every point that ended; rerun the same command "
                f"to resume")
    if state.label is None:
        return ("fedclust-jax: interrupted before the first round; nothing was saved; rerun "
                "the same command to start again")
    path = state.checkpoints.get(state.label)
    if path is None:
        return (f"{state.label}: interrupted; no checkpoint was asked for (add --checkpoint "
                f"FILE to make a run resumable)")
    held = _checkpoint_round(path)
    if held is None:
        return (f"{state.label}: interrupted; {path} holds no round yet; rerun the same "
                f"command to start again")
    return (f"{state.label}: interrupted; {path} holds round {held}; rerun the same command "
            f"to resume")


def main(argv=None) -> int:
    """The command line; exit code 0, 1 (a run diverged, its output went elsewhere or a
    checkpoint could not be saved: one line, the last good file kept), 2 (bad input, before
    compute) or 130 (interrupted by Ctrl-C or SIGTERM: one line on stderr saying what the
    checkpoint holds and how many rounds are lost)."""
    state = RunState()
    with interrupt_signals(), split_over_host_devices():
        try:
            return _main(argv, state)
        except KeyboardInterrupt as e:
            sys.stdout.flush()
            lead = "\n" if getattr(sys.stderr, "isatty", lambda: False)() else ""
            print(lead + interrupt_line(e, state), file=sys.stderr, flush=True)
            if argv is None:    # the program itself: leave now, as XLA's compile threads
                os._exit(130)   # may still run and crash the interpreter's teardown
            return 130
        except BrokenPipeError:  # stdout closed early (`| head`): stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141


def split_plugins(argv) -> tuple[list[str], list[str]]:
    """(plugin paths, the rest): every ``--plugin PATH`` / ``--plugin=PATH`` argument,
    before or after the command, after those of ``FEDCLUST_PLUGINS``
    (``registration.env_plugins``); plugins load before anything is parsed."""
    from fedclust_jax.registration import env_plugins
    args, plugins, rest = list(sys.argv[1:] if argv is None else argv), env_plugins(), []
    i = 0
    while i < len(args):
        if args[i] == "--plugin":
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ValueError("--plugin needs the path of a .py file, e.g. --plugin my_alg.py")
            plugins.append(args[i + 1])
            i += 2
        elif args[i].startswith("--plugin="):
            plugins.append(args[i].split("=", 1)[1])
            i += 1
        else:
            rest.append(args[i])
            i += 1
    return plugins, rest


def _main(argv, state: RunState) -> int:
    command_line = shlex.join(["fedclust-jax", *(sys.argv[1:] if argv is None else argv)])
    try:
        plugins, argv = split_plugins(argv)
        if plugins:
            from fedclust_jax.registration import load_plugins
            load_plugins(plugins)
    except ValueError as e:
        return error(e)
    args = make_parser().parse_args(argv)
    state.command = args.command
    if args.command == "list":
        try:
            print(list_everything(args.name))
        except ValueError as e:
            return error(e)
        return 0
    if args.command == "reproduce":
        from fedclust_jax import reproduce
        state.sweep_checkpoint = args.checkpoint
        return reproduce.main(args)
    if args.command == "plot":
        from fedclust_jax.plot import plot_command
        try:
            return plot_command(args)
        except (ValueError, ImportError) as e:
            return error(e)
    if args.command == "sweep":
        return main_sweep(args, state)
    from fedclust_jax.config_check import check_study_value
    from fedclust_jax.checkpoint import SaveFailed
    from fedclust_jax.experiment import checkpoint_paths, run_study, study_configs
    from fedclust_jax.progress import raise_lost_interrupt
    from fedclust_jax.results import (format_curves, format_layouts,
                                      format_settings, format_table, planned_settings,
                                      save_results)
    try:
        loggers = check_loggers(args.log)   # a tracker not installed: one line, before compute
        study = build_study(args, single=args.command == "run")
        configs = study_configs(study)  # every value type- and range-checked, no data built
        devices = check_study_value("devices", args.devices) if args.devices is not None else None
        if devices is not None and devices > 1:
            import jax
            if devices > jax.device_count():
                raise ValueError(f"--devices {devices}: only {jax.device_count()} "
                                 f"{jax.default_backend()} device(s) here")
        labels = [label for label, _ in configs]
        cadence = checkpoint_cadence(args)
        target = check_paths(args, labels)
        if args.checkpoint and len(labels) > 1:
            paths = checkpoint_paths(args.checkpoint, labels)
            print("checkpoints: " + ", ".join(f"{l} -> {p}" for l, p in paths.items()), file=sys.stderr)
        state.checkpoints = checkpoint_paths(args.checkpoint, labels)

        def on_start(label, cfg, data):
            """Before each algorithm; before the first, the data and every algorithm's
            effective settings, flushed, so they show before anything compiles."""
            raise_lost_interrupt()
            if state.label is None:
                print(data.summary())
                print(format_settings(planned_settings(configs, data)), flush=True)
            state.label = label
        writer = OutputAsItComes(target, lambda rs: output_of(rs, args.command, command_line))
        results = run_study(study, progress=not args.no_progress, checkpoint=args.checkpoint,
                            devices=devices, on_start=on_start, checkpoint_every=cadence,
                            on_result=writer, keep_state=bool(args.save_state), loggers=loggers)
    except (ValueError, FileNotFoundError) as e:
        return error(e)
    except SaveFailed as e:
        print(f"fedclust-jax: error: {e}", file=sys.stderr)
        return 1
    except MemoryError as e:
        return error(f"out of memory ({e}); use fewer clients, restarts or a smaller --chunk")
    except Exception as e:  # XLA out of memory during compute: advice instead of a traceback
        if "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e):
            return error("the run ran out of device memory; lower --restarts, --chunk (clients "
                         "per vectorized chunk) or the number of clients")
        raise
    layouts = format_layouts(results)
    if layouts:
        print(layouts)
    print(format_table(results))
    curves = format_curves(results)
    if curves:
        print()
        print(curves)
    for r in results:   # the best restart's values where they differ from the chosen's
        info, chosen = r["restarts"], r["metrics"]
        diag = ", ".join(f"{k[len('oracle_best_'):]} {info[k]:.4f}" for k in info
                         if k.startswith("oracle_best_")
                         and info[k] != chosen.get(k[len("oracle_best_"):]))
        if diag:
            print(f"{r['algorithm']}: restart {info['chosen']} of {len(info['objective'])} chosen by training "
                  f"objective; oracle best restart (uses ground truth, diagnostic only): {diag}")
    code = 0
    for r in results:
        m = r["metrics"]
        if m.get("misclustering") and m.get("num_clusters_found") is not None:
            units = "points" if "purity" in m else "clients"     # point clustering: purity
            print(f"note: {r['algorithm']} misclusters {m['misclustering']:.2f} of the {units}, "
                  f"with {m['num_clusters_found']} cluster(s) found; try more --restarts or "
                  "another --lr")
        bad = [k for k in ("test_loss", "test_acc") if isinstance(r["metrics"].get(k), float)
               and r["metrics"][k] != r["metrics"][k]]
        if bad:
            print(f"fedclust-jax: warning: {r['algorithm']} diverged ({bad[0]} is NaN); lower its "
                  "learning rate", file=sys.stderr)
            code = 1
    if args.save_state:
        from fedclust_jax.results import output_target
        paths = checkpoint_paths(args.save_state, [r["algorithm"] for r in results])
        for r in results:
            path = output_target(paths[r["algorithm"]], "trained", args.overwrite)
            r.pop("trained").save(path)
            print(f"{r['algorithm']}: final state written to {path}")
    if args.output:   # run: the result object; compare: a list of them; each names its command
        written = output_of(results, args.command, command_line)
        code = max(code, saved(save_results(written, args.output, args.overwrite), args.output,
                               f"results written to {args.output}"))
    return code


def output_of(results: list[dict], command: str, command_line: str):
    """What --output holds: `run` the result object, `compare` the list; each names the
    command line."""
    written = [{"command": command_line, **{k: v for k, v in r.items() if k != "trained"}}
               for r in results]
    return written[0] if command == "run" else written


class OutputAsItComes:
    """Called with the results (or rows) so far: writes ``render(them)`` to ``path``, so the
    file is whole after every algorithm or point. A write that fails is said once on stderr
    and not retried until the end (which falls back as ``results.save_results`` does)."""

    def __init__(self, path: str | None, render, rows: bool = False):
        self.path, self.render, self.rows, self.failed = path, render, rows, False

    def __call__(self, items):
        from fedclust_jax import results
        if not self.path or self.failed:
            return
        try:
            write = results.write_rows if self.rows else results.write_results
            write(self.render(items), self.path)
        except OSError as e:
            self.failed = True
            print(f"fedclust-jax: warning: could not write {self.path!r} ({e.strerror or e}); "
                  f"trying again at the end", file=sys.stderr, flush=True)


def saved(written: str, path: str, message: str) -> int:
    """Prints ``message`` and returns 0 when the results went to ``path``; 1 when they went
    to a fallback file (already said on stderr)."""
    if written != path:
        return 1
    print(message)
    return 0


def main_sweep(args, state: RunState) -> int:
    """`fedclust-jax sweep`: every grid value checked, then the programs run; exit 2 on a
    bad study (or a --checkpoint folder of another sweep), 1 when a point diverged, the
    output went elsewhere or a save failed."""
    from fedclust_jax.checkpoint import SaveFailed
    from fedclust_jax.experiment import study_configs
    from fedclust_jax.results import check_rows_path, format_rows, format_sweep_plan, save_rows
    from fedclust_jax.sweep import grid_key, parse_sweep, run_sweep
    try:
        loggers = check_loggers(args.log)   # a tracker not installed: one line, before compute
        study = load_config(args.config)
        if args.eval_every is not None:
            study["eval_every"] = args.eval_every
        base, paths, grid = parse_sweep(study)
        cadence = checkpoint_cadence(args)
        if args.checkpoint:
            from fedclust_jax.sweep_store import SweepStore
            SweepStore(args.checkpoint, *grid_key(study)).check()
            state.sweep_checkpoint = args.checkpoint
        if args.output and args.checkpoint:
            from fedclust_jax.results import distinct_outputs
            distinct_outputs([("--output", args.output, [args.output]),
                              ("--checkpoint", args.checkpoint, [args.checkpoint])],
                             folders={"--checkpoint"})
        target = check_rows_path(args.output, overwrite=args.overwrite) if args.output else None
        print(format_sweep_plan(study["sweep"], paths, len(grid), study_configs(base)),
              flush=True)
        writer = OutputAsItComes(target, lambda rows: rows, rows=True)
        rows = run_sweep(study, progress=not args.no_progress, checkpoint=args.checkpoint,
                         checkpoint_every=cadence, on_rows=writer, loggers=loggers)
    except (ValueError, FileNotFoundError) as e:
        return error(e)
    except SaveFailed as e:
        print(f"fedclust-jax: error: {e}", file=sys.stderr)
        return 1
    except MemoryError as e:
        return error(f"out of memory ({e}); sweep fewer points or use fewer clients or restarts")
    print(format_rows(rows, paths))
    code = 0
    bad = [r for r in rows if any(isinstance(r.get(k), float) and r[k] != r[k]
                                  for k in ("test_loss", "test_acc"))]
    if bad:
        print(f"fedclust-jax: warning: {len(bad)} point(s) diverged (NaN test metric), e.g. "
              f"{bad[0]['algorithm']} point {bad[0]['point']}; lower the learning rate", file=sys.stderr)
        code = 1
    if args.output:
        code = max(code, saved(save_rows(rows, args.output, args.overwrite), args.output,
                               f"{len(rows)} rows written to {args.output}"))
    return code


if __name__ == "__main__":
    sys.exit(main())
