"""A dataset's paper settings, declared beside its builder: what ``--dataset NAME`` runs.

    @paper_defaults(model="femnist-cnn", rounds=200, training={"lr": 0.04, "steps": 5},
                    algorithms={"fedavg": {}, "ifca": {"num_clusters": 4}},
                    source="SR-FCA paper: 50 writers, CNN, SGD lr 0.04, 200 rounds")
    def femnist(key, *, num_clients=None, data_dir=None): ...

``register_dataset`` reads the declaration (or takes ``defaults=``); a dataset without one
runs with ``DatasetDefaults()``: the builder's own parameters, the task's default model,
FedAvg and Local for 100 rounds.
"""

from __future__ import annotations

import copy
import dataclasses


@dataclasses.dataclass(frozen=True)
class DatasetDefaults:
    """What ``--dataset NAME`` runs on a dataset.

    model: the model its paper trains (None: linear for regression, an MLP for
    classification, a flow for data whose points carry clusters); model_args: that model's
    parameters; data: builder parameters that differ from the builder's own defaults;
    rounds: communication rounds; training: local-training settings every chosen algorithm
    that takes them gets (e.g. lr, steps, batch_size); algorithms: {algorithm: its paper
    settings} (the keys are what ``compare`` runs by default; a setting may also be
    "restarts" or "rounds"); source: where the numbers come from ("unstated" marks the
    choices the paper leaves open); unsupported: why no registered algorithm runs on it
    (None: they do).
    """

    model: str | None = None
    model_args: dict = dataclasses.field(default_factory=dict)
    data: dict = dataclasses.field(default_factory=dict)
    rounds: int = 100
    training: dict = dataclasses.field(default_factory=dict)
    algorithms: dict = dataclasses.field(default_factory=lambda: {"fedavg": {}, "local": {}})
    source: str = "the builder's own defaults (no paper settings declared)"
    unsupported: str | None = None

    def __post_init__(self):
        for name in ("model_args", "data", "training", "algorithms"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"DatasetDefaults.{name} must be a dict, got "
                                 f"{getattr(self, name)!r}")
        if not isinstance(self.rounds, int) or isinstance(self.rounds, bool) or self.rounds < 0:
            raise ValueError(f"DatasetDefaults.rounds must be an integer >= 0, got {self.rounds!r}")
        bad = [k for k, v in self.algorithms.items() if not isinstance(v, dict)]
        if bad:
            raise ValueError(f"DatasetDefaults.algorithms[{bad[0]!r}] must be a dict of settings")

    def params_for(self, algorithm: str, accepted) -> dict:
        """The settings ``algorithm`` gets: the ``training`` keys it accepts, then its own
        paper settings (which may add "restarts" and "rounds")."""
        params = {k: copy.deepcopy(v) for k, v in self.training.items() if k in accepted}
        own = self.algorithms.get(algorithm, {})
        params.update({k: copy.deepcopy(v) for k, v in own.items()
                       if k in accepted or k in ("restarts", "rounds")})
        return params


def paper_defaults(**settings):
    """Decorator: declares ``DatasetDefaults(**settings)`` on a dataset builder (read by
    ``register_dataset``)."""
    defaults = DatasetDefaults(**settings)

    def declare(builder):
        builder.paper_defaults = defaults
        return builder
    return declare
