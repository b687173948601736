"""Type stubs of the Rust extension module ``pfair._core`` (see ``rust/src/lib.rs``)."""

__version__: str

# ---- partition (rust/src/partition.rs); the public API is pfair.partition ----
import numpy as np
import numpy.typing as npt

def partition_heterogeneous(
    values: npt.NDArray[np.float64],
    n_silos: int,
    heterogeneity: float,
    seed: int,
    sizes: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.int64]: ...
def partition_dirichlet(
    groups: npt.NDArray[np.int64],
    n_silos: int,
    alpha: float,
    seed: int,
    sizes: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.int64]: ...
def partition_power_law_sizes(n: int, n_silos: int, exponent: float, min_size: int) -> npt.NDArray[np.int64]: ...
def partition_heterogeneity_tv(silo_ids: npt.NDArray[np.int64], groups: npt.NDArray[np.int64]) -> float: ...
def partition_heterogeneity_eta2(silo_ids: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> float: ...
