"""A user dataset from plain arrays: one file, one registration.

Clients hold points of a 2-D Gaussian blob problem; in cluster 1 the two labels are
swapped (concept shift), so one global model cannot fit both clusters. The arrays are made
with numpy and handed to ``from_client_lists``, which pads them into ``FederatedData``
([N, n_max, 2] points, int32 counts, the true cluster of each client).
"""

from __future__ import annotations

import jax
import numpy as np

from fedclust_jax import Positive, Size, paper_defaults, register_dataset
from fedclust_jax.data.federated import from_client_lists


@paper_defaults(model="mlp", model_args={"hidden": [16]}, rounds=20,
                training={"lr": 0.1, "steps": 5},
                algorithms={"fedavg": {}, "ifca": {"num_clusters": 2}, "oracle": {}},
                source="this example's own settings (no paper)")
def swapped_labels(key, num_clients: Size = 20, samples_per_client: Size = 40,
                   test_samples_per_client: Size = 20, separation: Positive = 2.0):
    """Two Gaussian blobs, labels swapped in cluster 1.

    num_clients: N clients, half in each cluster;
    samples_per_client: training points per client;
    test_samples_per_client: test points per client;
    separation: distance of the two class means from the origin."""
    if num_clients < 2 or samples_per_client < 1 or test_samples_per_client < 1:
        raise ValueError("swapped-labels needs num_clients >= 2 and at least one train and one "
                         "test point per client")
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    cluster = np.arange(num_clients) % 2

    def points(n, swap):
        y = rng.integers(0, 2, n)
        x = rng.normal(size=(n, 2)) + separation * np.where(y[:, None] == 1, 1.0, -1.0)
        return x.astype(np.float32), (1 - y if swap else y).astype(np.int32)

    train = [points(samples_per_client, c == 1) for c in cluster]
    test = [points(test_samples_per_client, c == 1) for c in cluster]
    return from_client_lists([x for x, _ in train], [y for _, y in train],
                             [x for x, _ in test], [y for _, y in test], cluster,
                             task="classification", num_classes=2)


register_dataset("swapped-labels", swapped_labels, replace=True,
                 help="two Gaussian blobs, labels swapped in cluster 1 (an example dataset)")
