"""fedclust_jax: a JAX simulator of clustered and Byzantine-robust federated learning.

Public extension API (``fedclust_jax.registration``): ``register_algorithm``,
``register_dataset``, ``register_model``; imported on first use, so ``import fedclust_jax``
stays cheap.
"""

__version__ = "0.1.0"

_REGISTRATION = ("register_algorithm", "register_dataset", "register_model")


def __getattr__(name):
    if name in _REGISTRATION:
        from fedclust_jax import registration
        return getattr(registration, name)
    raise AttributeError(f"module 'fedclust_jax' has no attribute {name!r}")


__all__ = ["__version__", *_REGISTRATION]
