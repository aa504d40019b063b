"""The command line on a CPU: several XLA host devices, client walks split over them.

Opt-in: with ``FEDCLUST_HOST_DEVICES`` set ("cores", or a count >= 2) the command line starts
JAX with that many host devices (``force_host_devices``, before JAX is imported), and with
several CPU devices it runs inside ``split_over_host_devices``: every chunked walk over
clients is split over the devices (``core.sharding.split_clients``), each device walking its
own block. Results equal the one-device run's up to float summation order. Off unless asked
for: the split is faster only when both cores are free.

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
    """Sets ``XLA_FLAGS`` to ``FEDCLUST_HOST_DEVICES`` host devices ("cores": ``cores()``)
    unless that is unset or below 2, JAX is already imported, the flags already give a
    device count, or JAX_PLATFORMS names a platform other than the CPU. Returns the count
    set, or None."""
    environ = os.environ if environ is None else environ
    asked = environ.get("FEDCLUST_HOST_DEVICES", "")
    n = cores() if asked == "cores" else int(asked) if asked.isdigit() else 0
    flags = environ.get("XLA_FLAGS", "")
    platforms = environ.get("JAX_PLATFORMS", "")
    if (n < 2 or "jax" in sys.modules or FLAG in flags
            or (platforms and "cpu" not in platforms)):
        return None
    environ["XLA_FLAGS"] = f"{flags} {FLAG}={n}".strip()
    return n


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
