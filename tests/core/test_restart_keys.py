"""The runner's keys: a restart's init and its rounds draw from different children of the
restart key (fold_in(k, 0) and fold_in(k, 1)), never from the restart key itself."""

import jax
import numpy as np
from flax import struct

from fedclust_jax.experiment import run_rounds
from fedclust_jax.algorithms.base import Algorithm
from fedclust_jax.data.synthetic import gaussian_mixture_classification


@struct.dataclass
class KeyState:
    init_key: jax.Array
    round_key: jax.Array


class RecordKeys(Algorithm):
    """An algorithm whose state records the key of its init and of its last round."""

    name = "record-keys"

    def init(self, key, data):
        return KeyState(init_key=jax.random.key_data(key), round_key=jax.random.key_data(key))

    def round(self, state, key, data):
        return state.replace(round_key=jax.random.key_data(key)), {}


def test_init_and_round_keys_are_split_from_the_restart_key():
    data = gaussian_mixture_classification(jax.random.key(0), num_clients=4, num_clusters=2,
                                           samples_per_client=3, test_samples_per_client=1,
                                           dim=2, num_classes=2)
    key = jax.random.key(42)
    states, _ = run_rounds(RecordKeys(), data, key, rounds=3, restarts=2, progress=False)
    for r, k in enumerate(jax.random.split(key, 2)):
        init = jax.random.key_data(jax.random.fold_in(k, 0))
        last = jax.random.key_data(jax.random.fold_in(jax.random.fold_in(k, 1), 2))
        np.testing.assert_array_equal(states.init_key[r], init)
        np.testing.assert_array_equal(states.round_key[r], last)
        assert not np.array_equal(states.init_key[r], jax.random.key_data(k))


def test_named_streams_are_distinct_and_are_the_documented_numbers():
    import pytest
    from fedclust_jax import loop
    from fedclust_jax.core import keys
    tables = [v for v in vars(keys).values() if isinstance(v, keys.Streams)]
    assert len(tables) >= 10
    assert (keys.RUN.data, keys.RUN.restarts, keys.RESTART.init, keys.RESTART.rounds) == (0, 1, 0, 1)
    with pytest.raises(ValueError, match="distinct"):
        keys.Streams(a=1, b=1)
    with pytest.raises(AttributeError, match="no key stream"):
        keys.IFCA_KEYS.attack
    seed = 5
    root = jax.random.key(seed)
    np.testing.assert_array_equal(jax.random.key_data(loop.data_key(seed)),
                                  jax.random.key_data(jax.random.fold_in(root, 0)))
    np.testing.assert_array_equal(jax.random.key_data(loop.run_key(seed)),
                                  jax.random.key_data(jax.random.fold_in(root, 1)))
