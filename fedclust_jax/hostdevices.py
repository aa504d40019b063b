"""The command line on a CPU: one XLA host device per core, client walks split over them.

XLA runs one client's small GEMMs (an MNIST client's [100, 784] @ [784, 200]) on one CPU
device with too little work per step to keep every core busy; with one host device per core
and each device walking its own block of clients (``core.sharding.split_clients``) the cores
work side by side. The device count is fixed when JAX starts, so ``force_host_devices``
runs at the command line's entry, before JAX is imported; ``split_over_host_devices`` then
opens the split for the run. Results equal the one-device run's up to float summation
order. ``XLA_FLAGS=--xla_force_host_platform_device_count=1`` keeps one device.

Nothing here imports JAX at module level.
"""

from __future__ import annotations

import contextlib
import os
import sys

FLAG = "--xla_force_host_platform_device_count"


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def force_host_devices(environ=None) -> int | None:
    """Sets ``XLA_FLAGS`` to one host device per core (``cores``) unless JAX is already
    imported, the flags already give a device count, or JAX_PLATFORMS names a platform
    other than the CPU. Returns the count set, or None."""
    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "")
    platforms = environ.get("JAX_PLATFORMS", "")
    if "jax" in sys.modules or FLAG in flags or (platforms and "cpu" not in platforms):
        return None
    n = cores()
    if n > 1:
        environ["XLA_FLAGS"] = f"{flags} {FLAG}={n}".strip()
    return n if n > 1 else None


@contextlib.contextmanager
def split_over_host_devices():
    """A block in which client walks are split over every device when the backend is the
    CPU with several (host) devices; otherwise the block runs as it is."""
    import jax
    if jax.default_backend() != "cpu" or jax.device_count() < 2:
        yield None
        return
    from fedclust_jax.core.sharding import client_mesh, split_clients
    with split_clients(client_mesh(jax.local_devices())) as mesh:
        yield mesh
