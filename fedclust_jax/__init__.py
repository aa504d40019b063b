"""fedclust_jax: a JAX simulator of clustered and Byzantine-robust federated learning.

Public extension API (docs/extending.md): ``register_algorithm``, ``register_dataset``,
``register_model`` (``fedclust_jax.registration``) and a dataset's ``paper_defaults`` /
``DatasetDefaults`` (``fedclust_jax.data.defaults``); the ranges a parameter's annotation
declares, ``Size``, ``Positive``, ``Fraction``, ``Bounds`` and their siblings
(``fedclust_jax.bounds``); for a dataset plugin ``from_client_lists`` and the standard
loaders ``load_images``, ``load_digits_images``, ``load_leaf_clients`` with
``resolve_data_dir`` and ``DataNotFoundError`` (``fedclust_jax.data``); for a model plugin
``Model`` (its ``head_mask`` / ``with_head`` split body and head) and ``from_nnx``
(``fedclust_jax.models``); a saved run's ``load_trained`` and ``Trained``
(``fedclust_jax.trained``) and the dataset key of a seed, ``data_key`` (``fedclust_jax.loop``).
Imported on first use, so ``import fedclust_jax`` stays cheap.
"""

__version__ = "0.1.0"

_FROM = {
    "fedclust_jax.registration": ("register_algorithm", "register_dataset", "register_model"),
    "fedclust_jax.data.defaults": ("paper_defaults", "DatasetDefaults"),
    "fedclust_jax.trained": ("load_trained", "Trained"),
    "fedclust_jax.bounds": ("Bounds", "Size", "Count", "Seed", "Positive", "NonNegative",
                            "Fraction", "Probability", "BelowOne", "OpenFraction",
                            "TrimFraction"),
    "fedclust_jax.data": ("from_client_lists", "load_images", "load_digits_images",
                          "load_leaf_clients", "resolve_data_dir", "DataNotFoundError"),
    "fedclust_jax.models.base": ("Model", "from_nnx"),
    "fedclust_jax.loop": ("data_key",),
}
_WHERE = {name: module for module, names in _FROM.items() for name in names}


def __getattr__(name):
    if name in _WHERE:
        import importlib
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'fedclust_jax' has no attribute {name!r}")


__all__ = ["__version__", *_WHERE]
