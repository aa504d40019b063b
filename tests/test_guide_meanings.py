"""A parameter's meaning runs across parentheses: a "; " or a "word: " inside (...) neither
ends it nor starts another entry (``fedclust_jax.describe``)."""

import pytest

from fedclust_jax.describe import meanings


@pytest.mark.parametrize("doc, expected", [
    ("mu: the weight (0 = FedAvg; the paper tunes it) of the term; k: clusters",
     {"mu": "the weight (0 = FedAvg; the paper tunes it) of the term", "k": "clusters"}),
    ("mu: the weight (0 = FedAvg; see: the paper) of the term; k: clusters",
     {"mu": "the weight (0 = FedAvg; see: the paper) of the term", "k": "clusters"}),
    ("mu: the weight (0 = FedAvg; k: not this k) of the term; k: clusters",
     {"mu": "the weight (0 = FedAvg; k: not this k) of the term", "k": "clusters"}),
    ("mu: the weight (0 = FedAvg;\n    note: across lines) of the term;\nk: clusters",
     {"mu": "the weight (0 = FedAvg; note: across lines) of the term", "k": "clusters"}),
    # intervals balance "(" with "]": the entry after one still starts
    ("mu: a share in (0, 1]; k: clusters [1, K]; z: other", {"mu": "a share in (0, 1]",
                                                            "k": "clusters [1, K]"}),
    # brackets that do not balance: read as before, entry by entry
    ("mu: 1) first; k: clusters", {"mu": "1) first", "k": "clusters"}),
])
def test_a_meaning_is_not_cut_inside_parentheses(doc, expected):
    assert meanings(doc, ["mu", "k"]) == expected


def test_list_shows_the_whole_meaning_of_a_plugin_parameter(capsys):
    from fedclust_jax import register_model
    from fedclust_jax.cli import main
    from fedclust_jax.models.registry import MODELS

    def paren_model(data, width: int = 8, depth: int = 1):
        """A plugin model.

        width: hidden units (16 in the paper; depth: not this one) per layer;
        depth: hidden layers."""
    register_model("paren-model", paren_model, replace=True)
    try:
        assert main(["list", "paren-model"]) == 0
        rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
        assert rows["width"].endswith("hidden units (16 in the paper; depth: not this one) "
                                      "per layer")
        assert rows["depth"].endswith("hidden layers")
    finally:
        MODELS.pop("paren-model")


def test_the_one_line_help_does_not_end_inside_parentheses():
    from fedclust_jax.describe import summary
    assert summary("FedAvgM (Hsu et al. 2019): FedAvg with server momentum. More.") == \
        "FedAvgM (Hsu et al. 2019): FedAvg with server momentum"
    assert summary("First. Second.") == "First"
