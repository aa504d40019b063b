"""Named key streams: where every random key of a run comes from.

A run's root key is ``key(seed)``. Every other key is ``fold_in(parent, number)``; a number
names a stream only among the children of one parent. Each table below lists the streams of
one kind of parent, every number used once in it, and ``table.key(parent, "name")`` is the
stream's key:

    key(seed) ─ RUN.data                       the dataset builder
              └ RUN.restarts ─ split(·, R)[r]  restart r's key
                                ├ RESTART.init     ``alg.init``
                                └ RESTART.rounds ─ fold_in(·, t)  round t's key

Inside a round an algorithm draws client i's key as ``fold_in(round_key, i)``
(``core.participation.client_keys``) and its other randomness from the streams of its own
table (``IFCA_KEYS.key(round_key, "order")``, ...). Client ids and the numbers of these
tables share the round key's children: client 2's key is also the ``order`` stream of FedAvg
and IFCA. The numbers are kept so that results stay those of earlier versions; a new
algorithm should draw its client keys from a stream of its own, as
``PARTICIPATION_KEYS.clients`` does.
"""

from __future__ import annotations

import jax


class Streams:
    """A table of named streams of one parent: ``Streams(order=2, draws=3)``; numbers are
    distinct non-negative integers. ``table.order`` is the number, ``table.key(parent,
    "order")`` the key ``fold_in(parent, 2)``."""

    def __init__(self, **numbers: int):
        values = list(numbers.values())
        if any(not isinstance(v, int) or v < 0 for v in values) or len(set(values)) != len(values):
            raise ValueError(f"stream numbers must be distinct integers >= 0, got {numbers}")
        self._numbers = dict(numbers)

    def __getattr__(self, name: str) -> int:
        try:
            return self.__dict__["_numbers"][name]
        except KeyError:
            raise AttributeError(f"no key stream {name!r}; streams: {sorted(self._numbers)}") from None

    def key(self, parent, name: str):
        """``fold_in(parent, number of name)``."""
        return jax.random.fold_in(parent, getattr(self, name))

    def __repr__(self) -> str:
        return f"Streams({', '.join(f'{k}={v}' for k, v in self._numbers.items())})"


# The run: children of key(seed), and of one restart's key.
RUN = Streams(data=0, restarts=1)
RESTART = Streams(init=0, rounds=1)

# Children of a round key, one table per user of them.
PARTICIPATION_KEYS = Streams(participants=0, clients=1)  # core.participation
FEDAVG_KEYS = Streams(order=2)                           # sequential participants' order
IFCA_KEYS = Streams(order=2, cluster_draws=3)            # order; S members drawn per cluster
SRFCA_KEYS = Streams(cluster_draws=2, order=3)
FEDSOFT_KEYS = Streams(cluster_draws=2)                  # Gumbel-top-S draws per cluster
THREE_STAGE_KEYS = Streams(clients=1, attack=2, kmeans=3)
BRIFCA_KEYS = Streams(attack=2)
PERSONAL_KEYS = Streams(attack=7)                        # fc / mc / myopic own gradients
FC_KEYS = Streams(groups=3, attack=7)
MC_KEYS = Streams(kmeans=5)
MYOPIC_KEYS = Streams(kmeans=5)

# Children of other keys.
BRIFCA_INIT_KEYS = Streams(noise=1)                      # BR-IFCA's init key: the noise leaves
# IFCA's init key, the code's pipeline (pretrain_rounds, warm_rounds): the pre-trained
# model's init, its rounds' parent key, the random groups, the warm rounds.
IFCA_INIT_KEYS = Streams(pretrain=1, pretrain_rounds=2, groups=3, warm_rounds=4)
DITTO_CLIENT_KEYS = Streams(personal=1)                  # a client's key: its personal steps
ONESHOT_INIT_KEYS = Streams(independent=1)               # ONE_SHOT's init key: independent inits
