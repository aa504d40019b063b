"""Vectorized primitives every algorithm is built from (clients are the leading axis)."""

from fedclust_jax.core.aggregate import (cluster_mean, combine, global_mean, mean_from_sums,
                                         membership)
from fedclust_jax.core.clients import (chain_clients, map_client_data, map_clients,
                                       resolve_chunk, stream_clients)
from fedclust_jax.core.losses import loss_matrix, loss_matrix_ids, own_loss, own_loss_ids
from fedclust_jax.core.participation import (client_keys, num_participants, participants,
                                              sample_participants)
from fedclust_jax.core.train import LocalTraining, client_gradient, cluster_pass, local_train

__all__ = [
    "LocalTraining", "chain_clients", "client_gradient", "cluster_mean", "combine", "global_mean",
    "local_train", "loss_matrix", "map_clients", "membership", "num_participants",
    "own_loss", "participants", "client_keys", "sample_participants",
    "stream_clients", "map_client_data", "resolve_chunk", "mean_from_sums", "cluster_pass",
    "loss_matrix_ids", "own_loss_ids",
]
from fedclust_jax.core.graph import connected_components, pivot_clustering  # noqa: E402
from fedclust_jax.core.pairwise import cosine_similarity, l2_distances  # noqa: E402

__all__ += ["connected_components", "pivot_clustering", "cosine_similarity", "l2_distances"]
from fedclust_jax.core.robust import (cluster_aggregate, cluster_median,  # noqa: E402
                                      cluster_trimmed_mean)
from fedclust_jax.core.threshold_clustering import threshold_clustering  # noqa: E402

__all__ += ["cluster_aggregate", "cluster_median", "cluster_trimmed_mean", "threshold_clustering"]
