"""One program of a sweep (points of one static configuration) as three compiled programs
vmapped over the points of a call, and the driver of one call: init, chunks of rounds with
checkpoints at the cadence, end of run.

Programs (``Programs``; c points per call, R restarts, data shared or [c, ...]):
  init   (hp {name: [c]}, data, seeds uint32[c]) -> states [c, R, ...]
         (``loop.init_states`` from the keys of ``loop.run_key(seed)``)
  chunk  (states, hp, data, seeds, start int32, n int32) -> (states, records)
         rounds start .. start + n - 1, each ``loop.run_chunk`` of one round (the loop every
         run goes through), in a ``lax.fori_loop`` whose trip count n is an argument: ONE
         compiled program runs a chunk of any length up to ``capacity`` rounds, so chunks
         are cut freely (progress, cadence) and a resumed call runs the very program the
         uninterrupted one does. records: the evaluation records ({name: [c, R, S, ...]},
         S = capacity // E + 1 slots) after the rounds t of the chunk with (t + 1) % E == 0,
         in order, with "round.<name>" for each scalar metric ``round`` returns (the
         algorithm's own, at the same rounds); the rest of the per-round history is not kept
         (rows hold final metrics and curves)
  end    (states, hp, data) -> (objective [c, R], evaluation {name: [c, R, ...]})
         (``loop.objective_and_evaluate``)
Round t's key is ``fold_in(round key, t)`` as in every run, so a point equals the single run
with its settings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedclust_jax import checkpoint as ckpt
from fedclust_jax import loop
from fedclust_jax.algorithms import hparams
from fedclust_jax.core.sharding import active_mesh, replicated
from fedclust_jax.progress import ChunkSchedule, Progress

CAPACITY = 1024     # most rounds one chunk call may run (bounds its records' buffer)


class Programs:
    """The three jitted programs of a group (module docstring). ``stats["traces"]`` counts
    the traces of the chunk program (one per compilation)."""

    def __init__(self, alg, cfg, spec, shared: bool, stats: dict, capacity: int):
        self.alg, self.cfg, self.spec, self.capacity = alg, cfg, spec, capacity
        self.eval_every = cfg.eval_every
        d = None if shared else 0
        # client walks split over host devices: the states live replicated on their mesh
        # from init on, so a chunk's input and output agree and it compiles once
        split = active_mesh()
        self.placement = None if split is None else replicated(split)
        placed = {} if split is None else dict(out_shardings=self.placement)
        self.init = jax.jit(jax.vmap(self._init, in_axes=(0, d, 0)), **placed)
        self.chunk = jax.jit(jax.vmap(self._chunk, in_axes=(0, 0, d, 0, None, None)),
                             donate_argnums=(0,), **placed)
        self.end = jax.jit(jax.vmap(self._end, in_axes=(0, 0, d)))
        self.stats = stats

    def _alg(self, hp):
        return self.alg.rebuild(hparams.with_values(self.alg.cfg, hp)) if hp else self.alg

    def _keys(self, seed):
        return loop.restart_keys(loop.run_key(seed), self.cfg.restarts)

    def _init(self, hp, data, seed):
        return loop.init_states(self._alg(hp), self._keys(seed)[0], data)

    def _end(self, states, hp, data):
        return loop.objective_and_evaluate(self._alg(hp), states, data)

    def _chunk(self, states, hp, data, seed, start, n):
        self.stats["traces"] = self.stats.get("traces", 0) + 1     # once per compilation
        alg, (_, round_keys), every = self._alg(hp), self._keys(seed), self.eval_every
        buf = {}
        if every:
            one = jax.tree.map(lambda a: a[0], states)
            shapes = jax.eval_shape(lambda s: loop.eval_record(alg, data, self.spec, s), one)
            history = jax.eval_shape(lambda s: loop.run_chunk(alg, s, round_keys, data,
                                                              jnp.arange(1))[1], states)
            shapes.update({f"round.{k}": jax.ShapeDtypeStruct((), v.dtype)
                           for k, v in history.items()
                           if v.shape[2:] == () and jnp.issubdtype(v.dtype, jnp.number)})
            slots = self.capacity // every + 1
            buf = {k: jnp.zeros((self.cfg.restarts, slots, *v.shape), v.dtype)
                   for k, v in shapes.items()}

        def body(i, carry):
            s, b = carry
            t = start + i
            s, h = loop.run_chunk(alg, s, round_keys, data, t[None], eval_every=every,
                                  spec=self.spec)
            if every:
                rec = {k[len("eval."):]: v[:, 0] for k, v in h.items() if k.startswith("eval.")}
                rec.update({k: h[k[len("round."):]][:, 0] for k in b if k.startswith("round.")})
                slot = (t + 1) // every - 1 - start // every
                put = lambda bb: {k: jax.lax.dynamic_update_index_in_dim(bb[k], rec[k], slot, 1)
                                  for k in bb}
                b = jax.lax.cond((t + 1) % every == 0, put, lambda bb: bb, b)
            return s, b
        return jax.lax.fori_loop(0, n, body, (states, buf))


class CallRun:
    """Where a call stands, for the line an interrupt prints: which call (``where``), its
    state file, the rounds done and the round the file holds (None: nothing saved)."""

    def __init__(self, rounds: int, where: str = "", state_path: str | None = None):
        self.rounds, self.where, self.state_path = rounds, where, state_path
        self.done, self.saved = 0, None


def run_call(programs: Programs, hp, data, seeds, *, state_path: str | None, config: dict,
             cadence, label: str, progress: bool, status: CallRun, tracker=None):
    """Runs one call's points from their saved state (``state_path``, when it exists) to the
    end: (objective [c, R], evaluation, records {name: [c, R, T, ...]} at the curve rounds).
    Saves the state at the ``cadence`` (and never after the last round: the call's rows
    follow). An interrupt writes the last finished chunk's state, then goes on as a
    KeyboardInterrupt (``status`` says where and what the file holds). tracker: a
    ``tracking.CallTracker`` given each chunk's records as they return."""
    cfg, every = programs.cfg, programs.eval_every
    rounds = cfg.rounds
    like = jax.eval_shape(programs.init, hp, data, seeds)
    found = ckpt.restore(state_path, like, config) if state_path else None
    if found is not None:
        states, saved, done, _ = found
        if programs.placement is not None:
            states = jax.device_put(states, programs.placement)
        records = [{k[len("eval."):]: v for k, v in saved.items()}] if saved else []
        status.done = status.saved = done
    else:
        states, records, done = programs.init(hp, data, seeds), [], 0
    schedule = ChunkSchedule(rounds, cfg.rounds_per_chunk,
                             cadence=cadence if state_path else None,
                             max_length=programs.capacity)
    bar = Progress(label, rounds, progress, start=done)
    last = None      # the host copy of the last finished chunk, written on an interrupt
    try:
        while done < rounds:
            stop = schedule.next_stop(done)
            states, buf = programs.chunk(states, hp, data, seeds, jnp.int32(done),
                                         jnp.int32(stop - done))
            count = len(loop.curve_rounds(stop, every, done))
            jax.block_until_ready(states)         # the schedule times compute, not dispatch
            buf = jax.device_get(buf)
            records.append({k: v[:, :, :count] for k, v in buf.items()})
            if tracker is not None:
                tracker.records(done, stop, records[-1], programs.spec)
            status.done = done = stop
            if state_path:
                last = ckpt.snapshot(state_path, states,
                                     {f"eval.{k}": v for k, v in _joined(records).items()},
                                     stop, config)
                if stop < rounds and schedule.save_due(stop):
                    ckpt.write(last)
                    status.saved = stop
                    schedule.saved()
            bar.update(stop)
    except KeyboardInterrupt:
        status.saved = ckpt.write_on_interrupt(last, status.saved)
        raise
    objective, evaluation = jax.device_get(programs.end(states, hp, data))
    return objective, evaluation, _joined(records)


def _joined(records: list[dict]) -> dict:
    """Records of successive chunks joined along the curve axis (axis 2)."""
    if not records:
        return {}
    return {k: np.concatenate([np.asarray(r[k]) for r in records], axis=2) for k in records[0]}
