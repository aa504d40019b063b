import sys

from fedclust_jax.hostdevices import force_host_devices

force_host_devices()   # FEDCLUST_HOST_DEVICES host devices, set before JAX starts

from fedclust_jax.cli import main  # noqa: E402

sys.exit(main())
