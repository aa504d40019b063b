"""Algorithms: one module per family, each an object with init / round / evaluate."""

from fedclust_jax.algorithms.fedavg import FedAvg, FedAvgConfig
from fedclust_jax.algorithms.ifca import IFCA, IFCAConfig
from fedclust_jax.algorithms.local import Local, LocalConfig
from fedclust_jax.algorithms.srfca import SRFCA, SRFCAConfig
from fedclust_jax.algorithms.cfl import CFL, CFLConfig
from fedclust_jax.algorithms.fedsoft import FedSoft, FedSoftConfig
from fedclust_jax.algorithms.local_kmeans import LocalKMeans, LocalKMeansConfig
from fedclust_jax.algorithms.oneshot_ifca import OneShotIFCA, OneShotIFCAConfig
from fedclust_jax.algorithms.uifca import UIFCA, UIFCAConfig  # point clustering
from fedclust_jax.algorithms.kfed import kfed

__all__ = ["FedAvg", "FedAvgConfig", "IFCA", "IFCAConfig", "Local", "LocalConfig", "SRFCA", "SRFCAConfig",
           "CFL", "CFLConfig", "FedSoft", "FedSoftConfig", "LocalKMeans", "LocalKMeansConfig",
           "OneShotIFCA", "OneShotIFCAConfig"]
from fedclust_jax.algorithms.brifca import BRIFCA, BRIFCAConfig  # noqa: E402
from fedclust_jax.algorithms.ditto import Ditto, DittoConfig  # noqa: E402
from fedclust_jax.algorithms.three_stage import ThreeStage, ThreeStageConfig  # noqa: E402
from fedclust_jax.algorithms.fc import FCConfig, FederatedClustering  # noqa: E402
from fedclust_jax.algorithms.mc import MCConfig, MomentumClustering  # noqa: E402
from fedclust_jax.algorithms.myopic import Myopic, MyopicConfig  # noqa: E402

__all__ += ["BRIFCA", "BRIFCAConfig", "Ditto", "DittoConfig", "ThreeStage", "ThreeStageConfig",
            "FCConfig", "FederatedClustering", "MCConfig", "MomentumClustering", "Myopic",
            "MyopicConfig"]
from fedclust_jax.algorithms.registry import ALGORITHMS, build_algorithm  # noqa: E402

__all__ += ["ALGORITHMS", "build_algorithm"]
__all__ += ["UIFCA", "UIFCAConfig", "kfed"]
