"""`fedclust-jax`: run one algorithm or compare several on the same data and seeds."""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tomllib

from fedclust_jax.presets import DEFAULT_PRESET, PRESETS, preset

EPILOG = """\
examples:
  fedclust-jax compare                      # FedAvg, Local and IFCA on the IFCA synthetic mixture
  fedclust-jax compare --preset mixture-classification --rounds 20
  fedclust-jax run --algorithm ifca --clusters 2 --lr 0.1 --set option=gradient --restarts 10
  fedclust-jax run --config my_study.toml --output results.json
  fedclust-jax list                         # datasets, models, algorithms and their parameters

config files (JSON or TOML) hold a study: dataset, data {...}, model, model_args {...},
rounds, seed, restarts, and algorithms {label: {param: value, algorithm: name}}.
"""


def parse_value(text: str):
    """'3' -> 3, '0.1' -> 0.1, 'true' -> True, 'none' -> None, '[1,2]' -> [1, 2], else str."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_pairs(pairs: list[str] | None, flag: str) -> dict:
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"{flag} takes key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = parse_value(value)
    return out


def load_config(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f) if path.endswith(".toml") else json.load(f)
    except FileNotFoundError:
        raise ValueError(f"config file {path!r} not found") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"config file {path!r} is not valid: {e}") from None


SHARED_FLAGS = (("clusters", "num_clusters"), ("lr", "lr"), ("local_steps", "steps"),
                ("batch_size", "batch_size"), ("participation", "participation"),
                ("option", "option"), ("chunk", "chunk"))


def build_study(args, *, single: bool) -> dict:
    """The study to run: preset or config file, then command-line overrides."""
    study = load_config(args.config) if args.config else preset(args.preset or DEFAULT_PRESET)
    for name in ("dataset", "model", "rounds", "seed", "restarts"):
        if getattr(args, name) is not None:
            study[name] = getattr(args, name)
    if args.dataset is not None and args.config is None and args.dataset != preset(args.preset or DEFAULT_PRESET)["dataset"]:
        study["data"], study["model_args"] = {}, {}  # the preset's parameters belong to its dataset
    study.setdefault("data", {}).update(parse_pairs(args.data, "--data"))
    if args.data_dir is not None:
        study["data"]["data_dir"] = args.data_dir
    study.setdefault("model_args", {}).update(parse_pairs(args.model_arg, "--model-arg"))

    chosen = args.algorithm if single else args.algorithms
    if chosen:
        names = [chosen] if single else [a.strip() for a in chosen.split(",") if a.strip()]
        known = study.get("algorithms", {})
        study["algorithms"] = {n: dict(known.get(n, {})) for n in names}
    elif single and len(study.get("algorithms", {})) != 1:
        raise ValueError("`run` needs one algorithm: pass --algorithm NAME "
                         f"(the study has {sorted(study.get('algorithms', {}))})")
    if args.restarts is not None:
        for params in study["algorithms"].values():
            params["restarts"] = args.restarts

    from fedclust_jax.algorithms.registry import ALGORITHMS, accepted_params
    labels = study["algorithms"]
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
    g.add_argument("--dataset", help="dataset name (see `fedclust-jax list`); resets the preset's data parameters")
    g.add_argument("--data", action="append", metavar="KEY=VALUE", help="dataset parameter (repeatable), e.g. --data num_clients=400")
    g.add_argument("--data-dir", help="directory holding downloaded datasets (else $FEDCLUST_DATA)")
    g.add_argument("--model", help="model name (default: linear for regression, MLP for classification)")
    g.add_argument("--model-arg", action="append", metavar="KEY=VALUE", help="model parameter (repeatable), e.g. --model-arg hidden=[200]")
    g = p.add_argument_group("schedule")
    g.add_argument("--rounds", type=int, help="communication rounds")
    g.add_argument("--seed", type=int, help="root random seed (data and algorithms)")
    g.add_argument("--restarts", type=int, help="random initialisations run as a batch; the one with the lowest training objective is reported")
    g = p.add_argument_group("algorithm parameters (applied to every chosen algorithm that has them)")
    g.add_argument("--clusters", type=int, help="number of cluster models K")
    g.add_argument("--lr", type=float, help="step size gamma")
    g.add_argument("--local-steps", type=int, help="local steps tau per round")
    g.add_argument("--batch-size", type=int, help="minibatch size (default: full batch)")
    g.add_argument("--participation", type=float, help="fraction of clients per round, in (0, 1]")
    g.add_argument("--option", choices=["gradient", "model"], help="IFCA option I (gradient) or II (model averaging)")
    g.add_argument("--chunk", type=int, help="clients per vectorized chunk (bounds memory; default all)")
    g.add_argument("--set", action="append", metavar="[ALG.]KEY=VALUE", help="any algorithm parameter (repeatable); ALG. limits it to one algorithm")
    g = p.add_argument_group("execution")
    g.add_argument("--checkpoint", help="checkpoint file (.npz) written after every chunk of rounds and "
                                        "resumed from when it exists (compare: one file per algorithm)")
    g.add_argument("--devices", type=int, help="split the clients over this many devices (default one)")
    g = p.add_argument_group("output")
    g.add_argument("--output", help="write results (config, metrics, history) to this JSON file")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedclust-jax", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="JAX simulator of clustered and Byzantine-robust federated learning.",
        epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run one algorithm and print its metrics",
                         description="Run one algorithm; prints a table and optionally writes JSON.")
    run.add_argument("--algorithm", help="algorithm name (see `fedclust-jax list`)")
    add_common(run)
    cmp_ = sub.add_parser("compare", help="run several algorithms on the same data and seed",
                          description="Run several algorithms on the same data and seed; prints one table "
                                      "(accuracy or loss, misclustering, ARI, parameter error, wall time).")
    cmp_.add_argument("--algorithms", help="comma-separated algorithm names (default: the preset's)")
    add_common(cmp_)
    sub.add_parser("list", help="list datasets, models, algorithms, presets and their parameters")
    return parser


def list_everything() -> str:
    import inspect

    from fedclust_jax.algorithms.registry import ALGORITHM_HELP, ALGORITHMS, accepted_params
    from fedclust_jax.data.registry import DATASETS
    from fedclust_jax.models.registry import MODELS
    lines = ["datasets:"]
    for name, fn in sorted(DATASETS.items()):
        params = [p for p in inspect.signature(fn).parameters if p != "key"]
        lines.append(f"  {name:28s} {', '.join(params)}")
    lines.append("models:")
    for name, fn in sorted(MODELS.items()):
        params = [p for p in inspect.signature(fn).parameters if p not in ("data", "params")]
        lines.append(f"  {name:28s} {', '.join(params)}")
    lines.append("algorithms:")
    for name in sorted(ALGORITHMS):
        lines.append(f"  {name:28s} {ALGORITHM_HELP.get(name, '')}")
        lines.append(f"  {'':28s} params: {', '.join(accepted_params(name))}")
    lines.append("presets:")
    for name, study in sorted(PRESETS.items()):
        lines.append(f"  {name:28s} {study['dataset']}: {', '.join(study['algorithms'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    if args.command == "list":
        print(list_everything())
        return 0
    try:
        study = build_study(args, single=args.command == "run")
        from fedclust_jax.experiment import format_table, run_study, save_results, study_configs
        study_configs(study)  # validate everything before any compute
        results = run_study(study, progress=not args.no_progress, checkpoint=args.checkpoint,
                            devices=args.devices)
    except (ValueError, FileNotFoundError) as e:
        print(f"fedclust-jax: error: {e}", file=sys.stderr)
        return 2
    print(results[0]["data"])
    print(format_table(results))
    for r in results:
        info = r["restarts"]
        if "oracle_best_param_error" in info or "oracle_best_misclustering" in info:
            diag = ", ".join(f"{k[len('oracle_best_'):]} {info[k]:.4f}" for k in info if k.startswith("oracle_best_"))
            print(f"{r['algorithm']}: restart {info['chosen']} of {len(info['objective'])} chosen by training "
                  f"objective; oracle best restart (uses ground truth, diagnostic only): {diag}")
    if args.output:
        save_results(results, args.output)
        print(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
