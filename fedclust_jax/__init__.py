"""fedclust_jax: a JAX simulator of clustered and Byzantine-robust federated learning."""

__version__ = "0.1.0"
