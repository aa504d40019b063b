import sys

from fedclust_jax.hostdevices import force_host_devices

force_host_devices()   # one host device per core, set before JAX starts

from fedclust_jax.cli import main  # noqa: E402

sys.exit(main())
