"""Adding your own algorithm, dataset or model: once registered, a name works everywhere a
built-in one does (``run``, ``compare``, ``sweep``, study files, ``list``, ``--dataset``,
restarts, curves, checkpoints, device meshes, plots). The built-ins go through the same
three calls.

    register_algorithm(name, algorithm_cls, config_cls, help="...", build=None)
        algorithm_cls subclasses ``fedclust_jax.algorithms.base.Algorithm`` and is built as
        ``algorithm_cls(model, config)``; config_cls is a frozen dataclass whose fields are
        the parameters (a field ``local: LocalTraining`` brings steps, lr, batch_size,
        optimizer, ...; ``TRACED``, a tuple of field names, lists those a sweep may vmap).
    register_dataset(name, builder, help="...", defaults=None)
        builder(key, **params) -> FederatedData; its keyword parameters (with defaults and
        annotations) become ``--data KEY=VALUE`` / ``[data]``; ``defaults`` (or
        ``@paper_defaults(...)`` on the builder) is what ``--dataset NAME`` runs.
    register_model(name, builder, help="...")
        builder(data, **params) -> ``models.base.Model`` (``models.base.from_nnx`` wraps a
        Flax NNX module); its keyword parameters become ``--model-arg`` / ``[model_args]``.

What describes a name lives beside it: the one-line help is ``help`` or the first sentence
of the builder's (algorithm class's) docstring, and each parameter's meaning is its entry
``name: meaning`` in the docstring of the builder or of the config class (the convention of
``fedclust_jax.describe``), and each parameter's range or choices are in its annotation
(``Size``, ``Bounds(...)``, ``Literal["a", "b"]``); ``fedclust-jax list NAME`` shows them.

A name already taken is refused (``replace=True`` replaces it). Registration lasts for the
Python process: the CLI takes ``--plugin FILE.py`` (or the ``FEDCLUST_PLUGINS`` variable,
paths separated by ``os.pathsep``) to import files that register before it parses
anything. ``examples/`` holds one complete case of each.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback

from fedclust_jax.algorithms.registry import register_algorithm
from fedclust_jax.data.registry import register_dataset
from fedclust_jax.models.registry import register_model

__all__ = ["register_algorithm", "register_dataset", "register_model", "load_plugins",
           "env_plugins"]


def load_plugins(paths) -> list[str]:
    """Imports each Python file of ``paths`` (its registrations take effect); returns the
    module names. ValueError (one line) for a missing file or one that fails to import."""
    names = []
    for path in paths:
        if not path:
            continue
        if os.path.isdir(path):
            raise ValueError(f"plugin {path!r} is a folder; give the path of a .py file that "
                             "registers algorithms, datasets or models")
        if not os.path.isfile(path):
            raise ValueError(f"plugin {path!r} does not exist; give the path of a .py file "
                             "that registers algorithms, datasets or models")
        if not path.endswith(".py"):
            raise ValueError(f"plugin {path!r} is not a Python file (.py); give the path of a "
                             ".py file that registers algorithms, datasets or models")
        name = "fedclust_plugin_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        if name in sys.modules:
            names.append(name)
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise ValueError(f"plugin {path!r} failed to import{_line_of(e, path)}: "
                             f"{type(e).__name__}: {e}") from None
        names.append(name)
    return names


def _line_of(error: Exception, path: str) -> str:
    """" at line N" of ``path`` where ``error`` arose (a syntax error's line, else the last
    traceback frame in that file), or ""."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f" at line {error.lineno}"
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    return f" at line {frames[-1].lineno}" if frames else ""


def env_plugins() -> list[str]:
    """The plugin paths of the ``FEDCLUST_PLUGINS`` environment variable."""
    return [p for p in os.environ.get("FEDCLUST_PLUGINS", "").split(os.pathsep) if p]
