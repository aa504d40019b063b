"""UIFCA Table 4.2 as a study (fedclust_jax/studies/uifca/table42.toml): a row of the table equals
`fedclust-jax run` with its settings and seed, and the oracle start trains each flow on
its own digit (CI size: the bundled 8x8 digits)."""

import numpy as np
import pytest

from fedclust_jax import reproduce
from fedclust_jax.experiment import run_experiment, study_configs
from fedclust_jax.sweep import apply_point, parse_sweep


def test_a_row_equals_the_single_run_with_its_settings_and_seed():
    spec = reproduce.load_spec("uifca-table42")
    study = reproduce.studies(spec, quick=True, seeds=[1])["RB+CM"]
    rows = reproduce.run_table({**spec, "study": study, "parts": None, "quick": {}},
                               quick=False, progress=False)
    base, _, _ = parse_sweep(study)
    (_, cfg), = study_configs(apply_point(base, {"seed": 1}))
    assert cfg.params["init_assign"] == "oracle" and cfg.data["random_background"] is True
    single = run_experiment(cfg, progress=False)
    assert rows[0]["seed"] == 1 and len(rows) == 1
    assert rows[0]["purity"] == pytest.approx(single["metrics"]["purity"], abs=1e-9)
    assert 0.5 <= single["metrics"]["purity"] <= 1.0
    sizes = np.asarray(single["history"]["cluster_sizes"])
    assert sizes.sum() == 200          # every point assigned to one of the two flows
