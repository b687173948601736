"""Type stubs of the Rust extension module ``pfair._core`` (see ``rust/src/lib.rs``)."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

# Label and group codes and row indices: int64, or int32 (half the memory; what a Federation makes).
Indices = npt.NDArray[np.int64] | npt.NDArray[np.int32]

__version__: str

# ---- psi kernels, sensitivities, noise (rust/src/psi/, sensitivity.rs, noise.rs) ----------
# theta has length (d+1)(l-1) (reference-class softmax); W has blocks*k*l entries; inv_sqrt_ps
# holds p(s=r|block)^(-1/2), blocks*k entries. Errors raise ValueError naming the argument.

def predict_proba(x: npt.NDArray[np.float64], theta: npt.NDArray[np.float64], n_classes: int) -> npt.NDArray[np.float64]: ...
def predict_counts(x: npt.NDArray[np.float64], theta: npt.NDArray[np.float64], n_classes: int) -> npt.NDArray[np.int64]:
    """Rows predicted as each class (largest logit, ties to the lower class): ``bincount(argmax(predict_proba))``."""
def batch_gradients(
    x: npt.NDArray[np.float64],
    y: Indices,
    s: Indices,
    theta: npt.NDArray[np.float64],
    w: npt.NDArray[np.float64],
    inv_sqrt_ps: npt.NDArray[np.float64],
    *,
    n_groups: int,
    n_classes: int,
    batch: npt.NDArray[np.int64],
    denom: float,
    fairness: str = "demographic_parity",
    positive: int = 1,
    protect: str = "attribute",
    clip_loss: float = ...,
    clip_theta: float = ...,
    clip_w: float = ...,
) -> Dict[str, Any]:
    """Keys: loss_grad, psi_theta_sfree, psi_theta, psi_w_sfree, psi_w (arrays), loss, psi, n_clipped."""

def sensitivities(
    inv_sqrt_ps: npt.NDArray[np.float64],
    *,
    n_groups: int,
    denom: float,
    fairness: str = "demographic_parity",
    positive: int = 1,
    protect: str = "attribute",
    clip_loss: float = ...,
    clip_theta: float = 1.0,
    clip_w: float = ...,
    relation: str = "replace_one",
    w_rows: bool = False,
) -> Tuple[float, float, float]:
    """(loss, theta, w) sensitivities; relation "replace_one" or "add_remove"."""

def noise_stds(parts: Sequence[float], noise_multiplier: float) -> List[float]: ...
def effective_noise_multiplier(parts: Sequence[float], stds: Sequence[float]) -> float: ...

# ---- noise keys and keyed draws (rust/src/noise.rs, round.rs) -------------------------------

class NoiseKey:
    """Key of a silo's random streams: secret (OS entropy; never printed or pickled) or seeded."""

    @staticmethod
    def secret() -> NoiseKey: ...
    @staticmethod
    def from_secret(key: bytes) -> NoiseKey: ...
    @staticmethod
    def seeded(seed: int) -> NoiseKey: ...
    @property
    def is_secret(self) -> bool: ...

def gaussian_stream(key: NoiseKey, silo: int, round: int, n: int, *, purpose: str = "noise") -> npt.NDArray[np.float64]: ...
def gaussian_release(key: NoiseKey, release_id: bytes, n: int) -> npt.NDArray[np.float64]: ...
def draw_batch(config: SiloConfig, n: int, *, key: NoiseKey, silo: int, round: int) -> npt.NDArray[np.int64]: ...
def noise_message(
    loss_grad: npt.NDArray[np.float64],
    psi_theta_sfree: npt.NDArray[np.float64],
    psi_theta: npt.NDArray[np.float64],
    psi_w_sfree: npt.NDArray[np.float64],
    psi_w: npt.NDArray[np.float64],
    config: SiloConfig,
    *,
    key: NoiseKey,
    silo: int,
    round: int,
) -> Tuple[npt.NDArray[np.float64], ...]:
    """The five parts with the round's noise added (new arrays). Refuses a config with ``clip_quantile``
    (its noise scales with the batch's clip: :meth:`SiloSet.noised_parts`)."""

# ---- federation and rounds (rust/src/round.rs, hybrid.rs) -----------------------------------

class SiloConfig:
    def __init__(
        self,
        *,
        sampling: str = "without_replacement",
        batch_size: int = 256,
        sample_rate: float = 1.0,
        protect: str = "attribute",
        clip_loss: float = ...,
        clip_theta: float = ...,
        clip_w: float = ...,
        sigma_loss: float = 0.0,
        sigma_theta: float = 0.0,
        sigma_w: float = 0.0,
        send_psi: bool = True,
        subspace: Optional[npt.NDArray[np.float64]] = None,
        clip_quantile: Optional[float] = None,
        w_row_scale: Optional[npt.NDArray[np.float64]] = None,
    ) -> None:
        """``clip_quantile`` (attribute mode): each round clips the b_i to that quantile of its batch's
        s-free scales (rust/src/psi/clip_scale.rs) and multiplies ``sigma_theta`` (then a std per unit of
        clip norm) by it. ``w_row_scale`` (attribute mode): the released ``p(r|b)^(-1/2)`` (``blocks × k``,
        flat); row (b, r) of h_W then takes noise of std ``sigma_w * w_row_scale[b*k + r]``, and a round
        refuses a config whose scales are not the round's ``inv_sqrt_ps``."""
    @property
    def w_row_scale(self) -> Optional[npt.NDArray[np.float64]]: ...
    @property
    def subspace(self) -> Optional[npt.NDArray[np.float64]]: ...
    @property
    def clip_quantile(self) -> Optional[float]: ...

class SiloSet:
    sizes: List[int]
    def __init__(
        self,
        silos: Sequence[Tuple[npt.NDArray[np.float64], Indices, Indices]],
        *,
        n_groups: int,
        n_classes: int,
        fairness: str = "demographic_parity",
        positive: int = 1,
    ) -> None: ...
    @staticmethod
    def from_matrix(
        x: npt.NDArray[Any],
        y: Sequence[Indices],
        s: Sequence[Indices],
        rows: Sequence[Indices],
        *,
        n_groups: int,
        n_classes: int,
        fairness: str = "demographic_parity",
        positive: int = 1,
    ) -> SiloSet: ...
    def is_shared(self, silo: int) -> bool: ...
    def gram(self, silo: int) -> npt.NDArray[np.float64]: ...
    def step(
        self,
        silo: int,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        config: SiloConfig,
        *,
        batch_key: NoiseKey,
        noise_key: NoiseKey,
        round: int,
    ) -> Dict[str, Any]:
        """Keys: the five parts, and the silo-local diagnostics loss, psi, n_clipped, clip_theta."""
    def parts(
        self,
        silo: int,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        batch: npt.NDArray[np.int64],
        config: SiloConfig,
    ) -> Dict[str, Any]:
        """Exact parts of the records ``batch`` (no noise), and loss, psi, n_clipped, clip_theta. Refuses a config
        with ``clip_quantile`` (use :meth:`noised_parts`)."""
    def noised_parts(
        self,
        silo: int,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        batch: npt.NDArray[np.int64],
        config: SiloConfig,
        *,
        key: NoiseKey,
        round: int,
    ) -> Dict[str, Any]:
        """The parts of ``batch`` clipped as ``config`` says (its fixed clip, or the adaptive clip of the
        batch) with round ``round``'s noise from ``key``; for a fixed clip the same as :meth:`parts` then
        :func:`noise_message`."""
    def predict_counts(self, theta: npt.NDArray[np.float64], per_silo: int, thin: int = 1) -> npt.NDArray[np.int64]:
        """Records predicted as each class over every silo's rows ``0, t, 2t, ...`` (``t = ceil(n_j / per_silo)``);
        with ``thin > 1`` every ``thin``-th of those rows only (stride ``thin * t``, a subset)."""
    def checkpoint_counts(
        self, theta: npt.NDArray[np.float64], *, table: bool = True, violation: bool = False,
        silos: Optional[Sequence[int]] = None,
    ) -> Tuple[Optional[npt.NDArray[np.float64]], Optional[npt.NDArray[np.float64]]]:
        """The exact checkpoint counts of the silos ``silos`` (default all) under ``theta``, one pass
        over each silo's records where they are held: the validation tables ``V[y, yhat]``
        (``len(silos) x l x l``) with ``table``, the violation histograms ``c[b, r, yhat]``
        (``len(silos) x blocks x k x l``) with ``violation`` (None when not asked for). The class of a
        record is the first largest of its class probabilities from its row in float64."""
    def run_rounds(
        self,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        configs: Sequence[SiloConfig],
        weights: Sequence[float],
        *,
        batch_keys: Sequence[NoiseKey],
        noise_keys: Sequence[NoiseKey],
        lam: float,
        lr_theta: float,
        lr_w: float,
        w_radius: float,
        start: int,
        n_rounds: int,
        snapshot_round: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Keys: theta, w, loss, psi, clipped, snapshot ((theta, w) or None). Silos of weight 0 are skipped."""

def nonfinite_rows(x: npt.NDArray[np.float64] | npt.NDArray[np.float32]) -> int: ...
def server_update(
    theta: npt.NDArray[np.float64],
    w: npt.NDArray[np.float64],
    block_len: int,
    messages: Sequence[Tuple[npt.NDArray[np.float64], ...]],
    weights: Sequence[float],
    *,
    lam: float,
    lr_theta: float,
    lr_w: float,
    w_radius: float,
) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...

class HybridSet:
    def __init__(
        self,
        x: npt.NDArray[np.float64],
        y: Indices,
        s: Indices,
        members: Sequence[npt.NDArray[np.int64]],
        owner: npt.NDArray[np.int64],
        *,
        n_sensitive: int,
        n_groups: int,
        n_classes: int,
        fairness: str = "demographic_parity",
        positive: int = 1,
    ) -> None: ...
    def messages(
        self,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        *,
        batch_size: int,
        clip_theta: float,
        sigma_theta: Sequence[float],
        sigma_w: Sequence[float],
        dummy_noise: bool = False,
        noise_keys: Sequence[NoiseKey],
        batch_key: NoiseKey,
        round: int,
    ) -> Dict[str, Any]:
        """Keys: non_sensitive (list of dicts), sensitive (list of (u, v) or None), intersection, union_size."""
    def non_sensitive_step(
        self,
        j: int,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        *,
        batch_size: int,
        clip_theta: float,
        batch_key: NoiseKey,
        round: int,
    ) -> Dict[str, Any]:
        """The five parts (s-free ones filled), batch (universal ids), by_owner (ids per sensitive silo)."""
    def sensitive_step(
        self,
        c: int,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        groups: Sequence[npt.NDArray[np.int64]],
        *,
        clip_theta: float,
        sigma_theta: float = 0.0,
        sigma_w: float = 0.0,
        noise_key: Optional[NoiseKey] = None,
        round: int = 0,
    ) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]: ...
    def run_rounds(
        self,
        theta: npt.NDArray[np.float64],
        w: npt.NDArray[np.float64],
        inv_sqrt_ps: npt.NDArray[np.float64],
        *,
        batch_size: int,
        clip_theta: float,
        sigma_theta: Sequence[float],
        sigma_w: Sequence[float],
        dummy_noise: bool = False,
        noise_keys: Sequence[NoiseKey],
        lam: float,
        lr_theta: float,
        lr_w: float,
        w_radius: float,
        batch_key: NoiseKey,
        start: int,
        n_rounds: int,
    ) -> Dict[str, Any]: ...

# ---- accounting (rust/src/accounting.rs) ----------------------------------------------------
# Errors raise ValueError("<argument>: <message>"). Noise multiplier = noise std / L2 sensitivity.

CALIBRATION_TOL: float

def default_orders() -> List[float]: ...
def rdp_gaussian(noise_multiplier: float, order: float) -> float: ...
def rdp_poisson(sample_rate: float, noise_multiplier: float, order: float) -> float: ...
def rdp_without_replacement(sample_rate: float, noise_multiplier: float, order: float) -> float: ...
def rdp_poisson_replace_one(sample_rate: float, noise_multiplier: float, order: float) -> float: ...
def rdp_public_batch(sample_rate: float, noise_multiplier: float, order: float) -> float: ...
def rdp_curve(
    sampling: str, sample_rate: float, noise_multiplier: float, steps: int, orders: Optional[Sequence[float]] = None
) -> List[float]: ...
def rdp_composed(
    events: Sequence[Tuple[str, float, float, int]], orders: Optional[Sequence[float]] = None
) -> List[float]: ...
def epsilon_from_rdp(orders: Sequence[float], rdp: Sequence[float], delta: float) -> Tuple[float, float]: ...
def delta_from_rdp(orders: Sequence[float], rdp: Sequence[float], epsilon: float) -> Tuple[float, float]: ...
def epsilon_for(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float, sampling: str,
    orders: Optional[Sequence[float]] = None,
) -> Tuple[float, float]: ...
def delta_for(
    noise_multiplier: float, sample_rate: float, steps: int, epsilon: float, sampling: str,
    orders: Optional[Sequence[float]] = None,
) -> Tuple[float, float]: ...
def noise_multiplier_for(epsilon: float, delta: float, sample_rate: float, steps: int, sampling: str) -> float: ...

Z_MIN: float
Z_MAX: float

def gaussian_delta(epsilon: float, mu: float) -> float: ...
def gaussian_epsilon(delta: float, mu: float) -> float: ...
def gaussian_mu(epsilon: float, delta: float) -> float: ...
def gdp_compose(mus: Sequence[float]) -> float: ...
def shuffle_rounds_per_epoch(sample_rate: float) -> int: ...
def shuffle_releases(sample_rate: float, steps: int) -> int: ...
def exact_epsilon_for(noise_multiplier: float, sample_rate: float, steps: int, delta: float, sampling: str) -> float: ...
def exact_delta_for(noise_multiplier: float, sample_rate: float, steps: int, epsilon: float, sampling: str) -> float: ...
def exact_noise_multiplier_for(epsilon: float, delta: float, sample_rate: float, steps: int, sampling: str) -> float: ...
def mixture_delta(epsilon: float, fixed_mu2: float, binomials: Sequence[Tuple[int, float, float]]) -> float: ...
def mixture_epsilon(delta: float, fixed_mu2: float, binomials: Sequence[Tuple[int, float, float]]) -> float: ...
def ledger_epsilons(mechanisms: Sequence[Tuple[str, float, float, int]], delta: float) -> Tuple[float, float, float]: ...
PLD_GRID: float
PLD_LEDGER_GRID: float

def pld_epsilon_for(noise_multiplier: float, sample_rate: float, steps: int, delta: float, sampling: str) -> float: ...
def pld_noise_multiplier_for(epsilon: float, delta: float, sample_rate: float, steps: int, sampling: str) -> float: ...
def pld_delta_for(noise_multiplier: float, sample_rate: float, steps: int, epsilon: float, sampling: str) -> float: ...
def ledger_admits(mechanisms: Sequence[Tuple[str, float, float, int]], delta: float, budget: float) -> bool: ...
def ledgers_admit(entries: Sequence[Tuple[Sequence[Tuple[str, float, float, int]], float, float]]) -> List[bool]: ...
def ledger_noise_multiplier_after(mechanisms: Sequence[Tuple[str, float, float, int]], delta: float, epsilon: float,
                                  sampling: str, sample_rate: float, steps: int,
                                  accountant: str = "best") -> Optional[float]: ...
# ---- partition (rust/src/partition.rs); the public API is pfair.partition ----

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
def silo_order(codes: npt.NDArray[np.int32], n_codes: int) -> Tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]: ...
