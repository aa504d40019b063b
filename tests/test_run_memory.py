"""A run whose first chunk of rounds the device cannot hold: with the layout the package
chose ("auto") it runs again with half the clients per chunk, to the same result; a layout
the user asked for, or one client per chunk, stops in one line; other errors are not
retried."""

import jax
import numpy as np
import pytest

from fedclust_jax import loop
from fedclust_jax.core import clients
from fedclust_jax.experiment import ExperimentConfig, run_experiment

OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 46.67GiB"


def config(chunk):
    return ExperimentConfig(dataset="synthetic-regression", rounds=3, restarts=2,
                            data={"num_clients": 8, "samples_per_client": 8,
                                  "test_samples_per_client": 4, "dim": 5},
                            algorithm="ifca", params={"num_clusters": 2, "lr": 0.05,
                                                      "option": "gradient", "chunk": chunk})


@pytest.fixture
def device(monkeypatch):
    """A device that holds at most ``fits`` clients per chunk, where "auto" asks for one
    vmap over all clients (as on an accelerator); records the chunks tried."""
    tried, real_run, real_resolve = [], loop.run_chunk, clients.resolve_chunk

    def run_chunk(alg, *a, **kw):
        chunk = alg.layout_chunk or 8
        tried.append(chunk)
        if chunk > device.fits:
            raise RuntimeError(OOM + "\nmore lines")
        return real_run(alg, *a, **kw)

    def resolve_chunk(chunk, num_clients=None, **kw):
        return None if chunk == clients.AUTO else real_resolve(chunk, num_clients, **kw)
    monkeypatch.setattr(loop, "run_chunk", run_chunk)
    monkeypatch.setattr(clients, "resolve_chunk", resolve_chunk)
    device.fits, device.tried, device.real_run = 8, tried, real_run
    return device


def test_auto_layout_halves_until_it_fits_and_gives_the_same_run(device, capsys):
    device.fits = 2
    out = run_experiment(config("auto"), progress=True)
    assert device.tried[-3:] == [8, 4, 2] and out["layout"]["chunk"] == 2
    assert out["layout"]["out_of_memory_at"] == [8, 4]
    assert f"ifca: out of device memory ({OOM}); 2 client(s) per chunk" in capsys.readouterr().err
    ref = run_experiment(config(2), progress=False)
    np.testing.assert_allclose(out["metrics"]["test_loss"], ref["metrics"]["test_loss"],
                               rtol=1e-5)
    assert out["restarts"]["objective"] == pytest.approx(ref["restarts"]["objective"], rel=1e-5)


@pytest.mark.parametrize("chunk, fits, words", [
    (4, 2, "with --chunk 4"),                 # the user's layout: not changed behind their back
    ("auto", 0, "does not fit"),              # one client per chunk is the end
])
def test_what_cannot_be_halved_is_one_line(device, chunk, fits, words):
    device.fits = fits
    with pytest.raises(ValueError, match=r"^ifca: the run does not fit in the device's memory"
                                         r".*RESOURCE_EXHAUSTED.*--chunk") as e:
        run_experiment(config(chunk), progress=False)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_other_errors_and_later_chunks_are_not_retried(device, monkeypatch):
    calls = []

    def run_chunk(alg, *a, **kw):
        calls.append(1)
        raise RuntimeError("INTERNAL: something else")
    monkeypatch.setattr(loop, "run_chunk", run_chunk)
    with pytest.raises(RuntimeError, match="INTERNAL"):
        run_experiment(config("auto"), progress=False)
    assert calls == [1]
    monkeypatch.setattr(loop, "run_chunk", device.real_run)
    waits, real_wait = [], jax.block_until_ready

    def second_chunk_out(tree):                # round 0 ended; round 1 does not fit
        waits.append(1)
        if len(waits) > 1:
            raise RuntimeError(OOM)
        return real_wait(tree)
    monkeypatch.setattr(jax, "block_until_ready", second_chunk_out)
    cfg = ExperimentConfig(**{**config("auto").to_dict(), "rounds_per_chunk": 1})
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
        run_experiment(cfg, progress=False)
    assert len(waits) == 2
