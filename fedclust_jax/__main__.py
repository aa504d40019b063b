import sys

from fedclust_jax.cli import main

sys.exit(main())
