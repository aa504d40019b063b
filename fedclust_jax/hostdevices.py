"""The command line on a CPU: one XLA host device per core, client walks split over them.

The rule (default): when the process may run on C >= 2 cores (``cores()``: its CPU
affinity), the command line starts JAX with C host devices (``force_host_devices``, before
JAX is imported) and runs inside ``split_over_host_devices``: every chunked walk over n
clients, n a multiple of C, is split over the C devices (``core.sharding.split_clients``),
each device walking its own block of n / C clients while the devices run at once. A walk
whose client count C does not divide runs as one walk, as everything else does; results
equal the one-device run's up to float summation order (so they depend on C at that level).

Why: one device walks the clients one at a time, each local step a product too small to
keep every core busy; C devices each walk their own clients at once. On a machine shared
with other busy jobs the devices compete for the cores, and ``FEDCLUST_HOST_DEVICES=1``
keeps one device. The measurements behind the rule: ``benchmarks/notes/performance.md``,
"Host devices on a CPU".

``FEDCLUST_HOST_DEVICES``: unset or "cores" (the rule), or a whole number >= 1 of host
devices (1: one device, no split). Any other value stops the command line before compute:
one line naming the accepted values, exit code 2. The flag is not set when JAX is already
imported, when ``XLA_FLAGS`` already gives a device count, or when ``JAX_PLATFORMS`` names
platforms without the CPU; accelerator runs are untouched (``split_over_host_devices``
acts only when JAX's default backend is the CPU).

Nothing here imports JAX at module level.
"""

from __future__ import annotations

import contextlib
import os
import sys

FLAG = "--xla_force_host_platform_device_count"
VARIABLE = "FEDCLUST_HOST_DEVICES"
ACCEPTED = ("cores (the default: one host device per core the process may use) or a whole "
            "number >= 1 (1: one device, no split)")


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def host_devices_asked(environ=None) -> int:
    """The number of host devices ``FEDCLUST_HOST_DEVICES`` asks for: ``cores()`` when it
    is unset, empty or "cores", else its whole number >= 1. ValueError (one line naming the
    accepted values) for anything else."""
    environ = os.environ if environ is None else environ
    asked = environ.get(VARIABLE, "").strip()
    if asked in ("", "cores"):
        return cores()
    if asked.isdigit() and int(asked) >= 1:
        return int(asked)
    raise ValueError(f"{VARIABLE}={environ.get(VARIABLE)!r} is not understood; accepted: "
                     f"{ACCEPTED}")


def _refuse(error: ValueError):
    print(f"fedclust-jax: error: {error}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def force_host_devices(environ=None) -> int | None:
    """Sets ``XLA_FLAGS`` to ``host_devices_asked()`` host devices unless that is 1, JAX is
    already imported, the flags already give a device count, or JAX_PLATFORMS names
    platforms without the CPU. Returns the count set, or None. A bad
    ``FEDCLUST_HOST_DEVICES`` stops the program: one line on stderr, exit code 2."""
    environ = os.environ if environ is None else environ
    try:
        n = host_devices_asked(environ)
    except ValueError as e:
        _refuse(e)
    flags = environ.get("XLA_FLAGS", "")
    platforms = environ.get("JAX_PLATFORMS", "")
    if (n < 2 or "jax" in sys.modules or FLAG in flags
            or (platforms and "cpu" not in platforms.split(","))):
        return None
    environ["XLA_FLAGS"] = f"{flags} {FLAG}={n}".strip()
    return n


@contextlib.contextmanager
def split_over_host_devices():
    """A block in which client walks are split over every device when the backend is the
    CPU with several (host) devices and ``FEDCLUST_HOST_DEVICES`` is not 1; otherwise the
    block runs as it is. A bad ``FEDCLUST_HOST_DEVICES`` stops the program (one line,
    exit code 2) before the block runs."""
    try:
        asked = host_devices_asked()
    except ValueError as e:
        _refuse(e)
    import jax
    if asked == 1 or jax.default_backend() != "cpu" or jax.device_count() < 2:
        yield None
        return
    from fedclust_jax.core.sharding import client_mesh, split_clients
    with split_clients(client_mesh(jax.local_devices())) as mesh:
        yield mesh
