"""fedclust_jax: a JAX simulator of clustered and Byzantine-robust federated learning.

Public extension API: ``register_algorithm``, ``register_dataset``, ``register_model``
(``fedclust_jax.registration``) and a dataset's ``paper_defaults`` / ``DatasetDefaults``
(``fedclust_jax.data.defaults``); the ranges a parameter's annotation declares, ``Size``,
``Positive``, ``Fraction``, ``Bounds`` and their siblings (``fedclust_jax.bounds``); a saved
run's ``load_trained`` (``fedclust_jax.trained``).
Imported on first use, so ``import fedclust_jax`` stays cheap.
"""

__version__ = "0.1.0"

_REGISTRATION = ("register_algorithm", "register_dataset", "register_model")
_DEFAULTS = ("paper_defaults", "DatasetDefaults")
_TRAINED = ("load_trained", "Trained")
_BOUNDS = ("Bounds", "Size", "Count", "Seed", "Positive", "NonNegative", "Fraction",
           "Probability", "BelowOne", "OpenFraction", "TrimFraction")


def __getattr__(name):
    if name in _REGISTRATION:
        from fedclust_jax import registration
        return getattr(registration, name)
    if name in _DEFAULTS:
        from fedclust_jax.data import defaults
        return getattr(defaults, name)
    if name in _TRAINED:
        from fedclust_jax import trained
        return getattr(trained, name)
    if name in _BOUNDS:
        from fedclust_jax import bounds
        return getattr(bounds, name)
    raise AttributeError(f"module 'fedclust_jax' has no attribute {name!r}")


__all__ = ["__version__", *_REGISTRATION, *_DEFAULTS, *_TRAINED, *_BOUNDS]
