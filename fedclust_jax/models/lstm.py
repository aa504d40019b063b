"""Shakespeare next-character model (LEAF / SR-FCA / IFCA): Embedding(80 -> 8) -> two stacked
LSTM layers of 256 -> Linear(256 -> 80) on the last time step.

x: int [n, L] tokens (L = 80 for LEAF windows) -> logits [n, vocab].
Parameters (vocab 80, embed 8, hidden 256): embedding 640; LSTM 1: 4 * (8 * 256) input
kernels + 4 * (256 * 256 + 256) recurrent kernels with biases = 271,360; LSTM 2: 525,312;
output 20,560; total 817,872. (PyTorch's nn.LSTM keeps two bias vectors per gate, 2,048
more in all; the function is the same.) Flax's cell: orthogonal recurrent kernels, LeCun
normal input kernels, zero biases. On a CPU, clients are mapped with ``lax.map`` rather than
``vmap``: a sequential LSTM per client runs faster there than one batched recurrence.

Batched initialisation: the orthogonal recurrent kernels are drawn by ``orthogonal_init``,
which computes one QR per model even under ``vmap`` (``jax.custom_batching.sequential_vmap``),
so ``jit(vmap(init))`` over K keys gives exactly the K one-key inits. Flax's own orthogonal
initializer batches the QR, and two batched QRs run at once can stall XLA's CPU thread pool
(jaxlib's LAPACK QR kernel waits on pool threads that its sibling holds).

The recurrence is Flax's fused cell (one input and one recurrent matmul per step inside the
time scan); projecting every step's input in one matmul before the loop gives the same
outputs and was not faster on a CPU, so it is not used.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from fedclust_jax.models.base import Model, from_nnx
from fedclust_jax.bounds import Size


def orthogonal_init(scale: float = 1.0):
    """Flax's orthogonal initializer ``(key, shape, dtype) -> array`` computing one QR per key
    under ``vmap`` (a loop over the batch), never one batched QR; same values as unbatched.
    See the module docstring for the batched QR that stalls XLA CPU."""
    base = nnx.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        return jax.custom_batching.sequential_vmap(lambda k: base(k, shape, dtype))(key)

    return init


class ShakespeareLSTM(nnx.Module):
    """tokens [n, L] -> logits [n, vocab] from the last step's top hidden state."""

    def __init__(self, rngs: nnx.Rngs, *, vocab: int = 80, embed: int = 8, hidden: int = 256,
                 layers: int = 2):
        self.embed = nnx.Embed(vocab, embed, rngs=rngs)
        sizes = [embed] + [hidden] * layers
        self.rnns = nnx.List([nnx.RNN(nnx.OptimizedLSTMCell(
                                   a, b, recurrent_kernel_init=orthogonal_init(), rngs=rngs),
                                   rngs=False)
                              for a, b in zip(sizes[:-1], sizes[1:])])
        self.out = nnx.Linear(hidden, vocab, rngs=rngs)

    def __call__(self, x):
        h = self.embed(jnp.asarray(x).astype(jnp.int32))
        for rnn in self.rnns:
            zeros = jnp.zeros((h.shape[0], rnn.cell.hidden_features), h.dtype)
            h = rnn(h, initial_carry=(zeros, zeros))  # LSTM carry (c, h) starts at zero
        return self.out(h[:, -1])


def shakespeare_lstm(vocab: int = 80, *, embed: int = 8, hidden: int = 256,
                     layers: int = 2) -> Model:
    """The Shakespeare stacked LSTM; the output layer is the head."""
    if min(vocab, embed, hidden, layers) < 1:
        raise ValueError(f"vocab, embed, hidden and layers must be >= 1, got "
                         f"{(vocab, embed, hidden, layers)}")
    return from_nnx(f"lstm{layers}x{hidden}",
                    lambda rngs: ShakespeareLSTM(rngs, vocab=vocab, embed=embed, hidden=hidden,
                                                 layers=layers),
                    task="classification", head=("out",))


def shakespeare_lstm_for(data, embed: Size = 8, hidden: Size = 256, layers: Size = 2) -> Model:
    """The Shakespeare next-character LSTM over ``data.num_classes`` symbols (80 for LEAF
    Shakespeare).

    embed: character embedding size; hidden: units of each LSTM layer; layers: stacked
    LSTM layers."""
    if len(data.feature_shape) != 1:
        raise ValueError(f"shakespeare-lstm needs token sequences [L], data has features "
                         f"{data.feature_shape}")
    return shakespeare_lstm(data.num_classes, embed=embed, hidden=hidden, layers=layers)
