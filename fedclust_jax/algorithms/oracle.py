"""The known-cluster baseline: per-cluster FedAvg with every client in its true cluster
(IFCA with the assignment frozen to the data's clusters)."""

from __future__ import annotations

import dataclasses

from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.bounds import Size


@dataclasses.dataclass(frozen=True)
class OracleConfig(IFCAConfig):
    """IFCA's settings with the assignment frozen to the data's true clusters.

    num_clusters: number of cluster models K (None: the data's number of true clusters);
    assignment: "oracle" (fixed: the clients' true clusters)."""

    num_clusters: Size | None = None
    assignment: str = "oracle"

    def __post_init__(self):
        if self.assignment != "oracle":
            raise ValueError(f"the oracle's assignment is \"oracle\", got {self.assignment!r}; "
                             "use algorithm ifca for another assignment")
        IFCAConfig.__post_init__(self.ifca_config(1) if self.num_clusters is None else self)

    def ifca_config(self, num_clusters: int) -> IFCAConfig:
        """These settings as IFCA's config with K = ``num_clusters`` where none is set."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(IFCAConfig)}
        return IFCAConfig(**dict(fields, num_clusters=self.num_clusters or num_clusters))

    def for_data(self, data) -> IFCAConfig:
        """The config as run on ``data``: K = its number of true clusters when unset."""
        return self.ifca_config(max(int(data.num_true_clusters), 1))


def build_oracle(model, cfg: OracleConfig, data) -> IFCA:
    """IFCA on ``data`` with the assignment frozen to its true clusters."""
    return IFCA(model, cfg.for_data(data))
