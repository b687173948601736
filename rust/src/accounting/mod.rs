//! Rényi-DP accountant for the Gaussian mechanism under the three batch schemes pfair uses.
//!
//! Units: a *noise multiplier* `z` is `noise std / L2 sensitivity`, where the sensitivity is
//! measured under the adjacency each function names:
//!
//! * [`Scheme::WithoutReplacement`] and [`Scheme::FullBatch`]: **replace-one** sensitivity (one
//!   record's `s` replaced; the record stays in the data set), the convention of
//!   `crate::sensitivity`, so `z = σ / Δ_replace`.
//! * [`Scheme::Poisson`]: **add/remove-one** sensitivity (the largest norm of one record's
//!   contribution). This is the textbook sampled-Gaussian contract, kept so it can be checked
//!   against other libraries; it is *not* an accountant for pfair's adjacency.
//! * [`Scheme::PoissonReplaceOne`]: Poisson sampling under replace-one adjacency, with `z`
//!   measured against the *add/remove* sensitivity `Δ_ar` (max norm of one record's contribution,
//!   so `‖u − u'‖ ≤ 2 Δ_ar`). See [`rdp_poisson_replace_one`] and `docs/accounting.md`.
//!
//! Every RDP value is a per-step Rényi divergence bound `ε(α)` at order `α > 1`; composition adds
//! them (Mironov 2017, Prop. 1); the (ε, δ) conversion is Balle et al. 2020, Thm. 21.
//! Numerics: all sums are done in log space. The WOR bound's forward differences are evaluated
//! exactly (as Gaussian integrals, see `bounds::wor_even_difference`), not by float64
//! differencing.
//!
//! Layout: this file holds the shared types ([`Scheme`], [`AccountingError`], [`Event`]), input
//! validation, the default orders and composition; `bounds` the per-step RDP bounds and
//! [`rdp_step`], the one dispatch from a scheme to its bound; `convert` the RDP → (ε, δ)
//! conversions; `calibrate` the noise-multiplier calibration (in the bracket [`Z_MIN`], [`Z_MAX`] defined here). Everything public is re-exported
//! here, so every item keeps its `crate::accounting::…` path.

use std::fmt;

mod bounds;
mod calibrate;
mod convert;
mod gaussian;
mod ledger;
mod mixture;
mod pld;

use bounds::StepBound;

pub use bounds::{
    rdp_gaussian, rdp_poisson, rdp_poisson_replace_one, rdp_public_batch, rdp_step, rdp_without_replacement,
};
pub use calibrate::{
    noise_multiplier_for, noise_multiplier_for_orders, pld_noise_multiplier_for, CALIBRATION_TOL,
};
pub use convert::{delta_for, delta_from_rdp, epsilon_for, epsilon_from_rdp};
pub use gaussian::{gaussian_delta, gaussian_epsilon, gaussian_mu, gdp_compose, log_gaussian_delta, log_ndtr};
pub use pld::{is_pld_scheme, pld_delta_for, pld_epsilon_for, Pld, PLD_GRID, PLD_LEDGER_GRID};
pub use ledger::{
    ledger_admits, ledger_epsilon, ledger_exact_epsilon, ledger_mixture, ledger_noise_multiplier_after,
    ledger_pld_epsilon, ledger_pld_noise_multiplier_after, ledger_rdp_epsilon, ledgers_admit, Held, AFTER_Z_MAX,
};
pub use mixture::{
    exact_delta_for, exact_epsilon_for, exact_noise_multiplier_for, mixture_delta, mixture_epsilon, Binomial, Mixture,
};

/// Calibration bracket of the noise multiplier ([`noise_multiplier_for`], the exact mixture's
/// calibration, the ledger's search): `z ∈ [Z_MIN, Z_MAX]`. Here, with the shared types, so that
/// `calibrate`, `mixture` and `ledger` read it without importing one another.
pub const Z_MIN: f64 = 1e-3;
/// Upper end of the calibration bracket.
pub const Z_MAX: f64 = 1e6;

/// Which batch scheme a mechanism's steps use (and hence which RDP bound applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Fixed-size batches of `m = q n` records drawn uniformly without replacement; replace-one
    /// adjacency (Wang, Balle, Kasiviswanathan 2019).
    WithoutReplacement,
    /// Poisson sampling with rate `q`; add/remove-one adjacency (Mironov, Talwar, Zhang 2019).
    Poisson,
    /// Poisson sampling with rate `q`; replace-one adjacency via [`rdp_poisson_replace_one`].
    PoissonReplaceOne,
    /// Every record in every step (`q = 1`); replace-one adjacency.
    FullBatch,
    /// Each record enters a step's batch with probability `q` (independently across steps), and
    /// WHO is in the batch is public: the rest of the message reveals it. Replace-one adjacency,
    /// no secrecy of the sample assumed. See [`rdp_public_batch`].
    PublicBatch,
    /// Shuffled epochs: every record exactly once per epoch, in `b = ⌈1/q⌉` fixed-size batches
    /// (`q = m/n`); batch membership public or not. A record takes part in at most one round per
    /// epoch, so `steps` rounds starting at an epoch's first round are `⌈steps/b⌉` Gaussian
    /// releases (see [`shuffle_releases`]); replace-one adjacency, `z = σ / Δ_replace`.
    Shuffle,
}

impl Scheme {
    /// Parses the public names `"without_replacement"`, `"poisson"`, `"poisson_replace_one"`,
    /// `"full_batch"`, `"public_batch"`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "without_replacement" => Ok(Scheme::WithoutReplacement),
            "poisson" => Ok(Scheme::Poisson),
            "poisson_replace_one" => Ok(Scheme::PoissonReplaceOne),
            "full_batch" => Ok(Scheme::FullBatch),
            "public_batch" => Ok(Scheme::PublicBatch),
            "shuffle" => Ok(Scheme::Shuffle),
            other => Err(AccountingError::UnknownSampling(other.to_string())),
        }
    }

    /// The public name (inverse of [`Scheme::parse`]).
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::WithoutReplacement => "without_replacement",
            Scheme::Poisson => "poisson",
            Scheme::PoissonReplaceOne => "poisson_replace_one",
            Scheme::FullBatch => "full_batch",
            Scheme::PublicBatch => "public_batch",
            Scheme::Shuffle => "shuffle",
        }
    }
}

/// Bad input to the accountant, or a calibration that cannot be met. Never a panic.
#[derive(Clone, Debug, PartialEq)]
pub enum AccountingError {
    /// `sample_rate` must lie in (0, 1].
    SampleRate(f64),
    /// `full_batch` needs `sample_rate == 1`.
    FullBatchRate(f64),
    /// `noise_multiplier` must be finite and > 0.
    NoiseMultiplier(f64),
    /// `delta` must lie in (0, 1).
    Delta(f64),
    /// `epsilon` must be finite and > 0.
    Epsilon(f64),
    /// `steps` must be ≥ 1.
    Steps,
    /// Every RDP order must be finite and > 1.
    Order(f64),
    /// The order list is empty.
    NoOrders,
    /// `orders` and `rdp` have different lengths.
    LengthMismatch { orders: usize, rdp: usize },
    /// An RDP value is NaN.
    RdpValue(f64),
    /// Unknown sampling scheme name.
    UnknownSampling(String),
    /// Even the largest noise multiplier of the bracket does not reach the target ε.
    Unreachable { epsilon: f64, z_max: f64, epsilon_at_z_max: f64 },
    /// Even the smallest noise multiplier of the bracket already meets the target ε.
    TargetTooLoose { epsilon: f64, z_min: f64, epsilon_at_z_min: f64 },
    /// Bisection ended without an ε within the tolerance (ε(z) not continuous enough).
    NotConverged { epsilon: f64, best: f64 },
    /// A GDP parameter μ must be finite and > 0 (≥ 0 inside a composition).
    Mu(f64),
    /// The exact (Gaussian / binomial-mixture) accountant needs a scheme whose releases are
    /// Gaussian given public information.
    NotExact(Scheme),
}

impl AccountingError {
    /// The public argument the error is about (used for Python `ValueError` messages).
    pub fn argument(&self) -> &'static str {
        match self {
            AccountingError::SampleRate(_) | AccountingError::FullBatchRate(_) => "sample_rate",
            AccountingError::NoiseMultiplier(_) => "noise_multiplier",
            AccountingError::Delta(_) => "delta",
            AccountingError::Epsilon(_) => "epsilon",
            AccountingError::Steps => "steps",
            AccountingError::Order(_) | AccountingError::NoOrders => "orders",
            AccountingError::LengthMismatch { .. } | AccountingError::RdpValue(_) => "rdp",
            AccountingError::UnknownSampling(_) | AccountingError::NotExact(_) => "sampling",
            AccountingError::Mu(_) => "mu",
            AccountingError::Unreachable { .. }
            | AccountingError::TargetTooLoose { .. }
            | AccountingError::NotConverged { .. } => "epsilon",
        }
    }
}

impl fmt::Display for AccountingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccountingError::SampleRate(q) => {
                write!(f, "sample_rate must be in (0, 1] (batch size / silo size); got {q}")
            }
            AccountingError::FullBatchRate(q) => write!(
                f,
                "sample_rate must be 1 when sampling='full_batch'; got {q} (use 'without_replacement' for mini-batches)"
            ),
            AccountingError::NoiseMultiplier(z) => write!(
                f,
                "noise_multiplier must be finite and > 0 (noise std / L2 sensitivity); got {z}"
            ),
            AccountingError::Delta(d) => write!(f, "delta must be in (0, 1), e.g. 1/n^2; got {d}"),
            AccountingError::Epsilon(e) => write!(f, "epsilon must be finite and > 0; got {e}"),
            AccountingError::Steps => write!(f, "steps must be an integer >= 1; got 0"),
            AccountingError::Order(a) => {
                write!(f, "every RDP order must be finite and > 1; got {a}")
            }
            AccountingError::NoOrders => write!(f, "orders must not be empty"),
            AccountingError::LengthMismatch { orders, rdp } => write!(
                f,
                "rdp must have one value per order; got {rdp} values for {orders} orders"
            ),
            AccountingError::RdpValue(r) => write!(f, "rdp values must not be NaN; got {r}"),
            AccountingError::UnknownSampling(s) => write!(
                f,
                "sampling must be one of 'without_replacement', 'poisson', 'poisson_replace_one', 'full_batch', 'public_batch', 'shuffle'; got {s:?}"
            ),
            AccountingError::Unreachable { epsilon, z_max, epsilon_at_z_max } => write!(
                f,
                "epsilon={epsilon} is unreachable: even noise_multiplier={z_max:e} gives epsilon={epsilon_at_z_max}; raise epsilon or delta, or lower steps or sample_rate"
            ),
            AccountingError::TargetTooLoose { epsilon, z_min, epsilon_at_z_min } => write!(
                f,
                "epsilon={epsilon} is met even by noise_multiplier={z_min:e} (epsilon={epsilon_at_z_min}); such a loose target is outside the calibration bracket"
            ),
            AccountingError::Mu(m) => write!(f, "mu (GDP parameter, sensitivity / noise std) must be finite and > 0; got {m}"),
            AccountingError::NotExact(s) => write!(
                f,
                "sampling={:?} hides its batch: its releases are not Gaussian given public information, so the exact \
                 (GDP / binomial-mixture) accountant does not apply; use the RDP or PLD accountant",
                s.name()
            ),
            AccountingError::NotConverged { epsilon, best } => write!(
                f,
                "calibration for epsilon={epsilon} did not reach the 2% tolerance (best feasible epsilon {best})"
            ),
        }
    }
}

impl std::error::Error for AccountingError {}

/// Result type of the accountant.
pub type Result<T> = std::result::Result<T, AccountingError>;

// ---------------------------------------------------------------------------------------------
// Validation (one place, used by every public function).

fn check_rate(q: f64) -> Result<()> {
    if q.is_finite() && q > 0.0 && q <= 1.0 {
        Ok(())
    } else {
        Err(AccountingError::SampleRate(q))
    }
}

fn check_z(z: f64) -> Result<()> {
    if z.is_finite() && z > 0.0 {
        Ok(())
    } else {
        Err(AccountingError::NoiseMultiplier(z))
    }
}

fn check_order(alpha: f64) -> Result<()> {
    if alpha.is_finite() && alpha > 1.0 {
        Ok(())
    } else {
        Err(AccountingError::Order(alpha))
    }
}

fn check_orders(orders: &[f64]) -> Result<()> {
    if orders.is_empty() {
        return Err(AccountingError::NoOrders);
    }
    orders.iter().try_for_each(|&a| check_order(a))
}

fn check_delta(delta: f64) -> Result<()> {
    if delta.is_finite() && delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(AccountingError::Delta(delta))
    }
}

fn check_epsilon(eps: f64) -> Result<()> {
    if eps.is_finite() && eps > 0.0 {
        Ok(())
    } else {
        Err(AccountingError::Epsilon(eps))
    }
}

fn check_scheme_rate(scheme: Scheme, q: f64) -> Result<()> {
    check_rate(q)?;
    if scheme == Scheme::FullBatch && q != 1.0 {
        return Err(AccountingError::FullBatchRate(q));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Orders.

/// The default RDP orders: dp-accounting's `DEFAULT_RDP_ORDERS` (1.1..10.9 by 0.1, 11..63,
/// 128, 256, 512, 1024) extended with half-integers 11.5..19.5 and the integers 64..120 by 8,
/// 160, 192, 384, 768. Orders only ever tighten the bound (ε is a minimum over orders).
pub fn default_orders() -> Vec<f64> {
    let mut o: Vec<f64> = (1..100).map(|x| 1.0 + x as f64 / 10.0).collect();
    o.extend((11..64).map(|x| x as f64));
    o.extend((11..20).map(|x| x as f64 + 0.5));
    o.extend((8..16).map(|x| (8 * x) as f64));
    o.extend([128.0, 160.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0]);
    o.sort_by(|a, b| a.total_cmp(b));
    o.dedup();
    o
}

// ---------------------------------------------------------------------------------------------
// Events and composition.

/// One recorded mechanism: `steps` releases of a Gaussian with noise multiplier `z` on batches
/// drawn by `scheme` at rate `q`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Event {
    pub scheme: Scheme,
    pub q: f64,
    pub z: f64,
    pub steps: u64,
}

impl Event {
    /// Validates the event's parameters.
    pub fn check(&self) -> Result<()> {
        check_scheme_rate(self.scheme, self.q)?;
        check_z(self.z)?;
        if self.steps == 0 {
            return Err(AccountingError::Steps);
        }
        Ok(())
    }
}

/// Rounds per epoch of shuffled epochs at rate `q = m/n`: `b = ⌈n/m⌉ = ⌈1/q⌉`, computed so that
/// float rounding of `q` can only make `b` smaller (more epochs, so more releases charged).
pub fn shuffle_rounds_per_epoch(q: f64) -> u64 {
    ((1.0 / q) * (1.0 - 1e-12)).ceil().max(1.0) as u64
}

/// Gaussian releases per record of `steps` shuffled rounds that start at an epoch's first round:
/// the number of epochs they touch, `⌈steps/b⌉` with `b` = [`shuffle_rounds_per_epoch`].
pub fn shuffle_releases(q: f64, steps: u64) -> u64 {
    steps.div_ceil(shuffle_rounds_per_epoch(q))
}

impl Event {
    /// How many per-step bounds compose: `steps`, except for [`Scheme::Shuffle`], where a record
    /// is in one batch per epoch ([`shuffle_releases`]).
    pub fn releases(&self) -> u64 {
        if self.scheme == Scheme::Shuffle {
            shuffle_releases(self.q, self.steps)
        } else {
            self.steps
        }
    }
}

/// Total RDP of `event.steps` adaptive compositions at each order (Mironov 2017, Prop. 1:
/// RDP adds up under composition); for shuffled epochs, of its [`Event::releases`].
pub fn rdp_curve(event: &Event, orders: &[f64]) -> Result<Vec<f64>> {
    event.check()?;
    check_orders(orders)?;
    let t = event.releases() as f64;
    let mut step = StepBound::new(event.scheme, event.q, event.z);
    Ok(orders.iter().map(|&a| step.rdp(a) * t).collect())
}

/// Total RDP of heterogeneous events (sum over events of [`rdp_curve`]).
pub fn rdp_composed(events: &[Event], orders: &[f64]) -> Result<Vec<f64>> {
    check_orders(orders)?;
    let mut total = vec![0.0; orders.len()];
    for e in events {
        for (acc, r) in total.iter_mut().zip(rdp_curve(e, orders)?) {
            *acc += r;
        }
    }
    Ok(total)
}

/// Relative error, for the unit tests of every file of the module.
#[cfg(test)]
fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_orders_are_sorted_valid_and_contain_dp_accounting_defaults() {
        let o = default_orders();
        assert!(o.windows(2).all(|w| w[0] < w[1]));
        assert!(o.iter().all(|&a| a > 1.0 && a.is_finite()));
        for a in [1.1, 2.5, 10.9, 11.0, 63.0, 128.0, 256.0, 512.0, 1024.0] {
            assert!(o.iter().any(|&b| (a - b).abs() < 1e-12), "missing order {a}");
        }
    }

    #[test]
    fn scheme_names_round_trip_and_unknown_is_an_error() {
        for s in [Scheme::WithoutReplacement, Scheme::Poisson, Scheme::PoissonReplaceOne, Scheme::FullBatch, Scheme::Shuffle] {
            assert_eq!(Scheme::parse(s.name()).unwrap(), s);
        }
        let e = Scheme::parse("uniform").unwrap_err();
        assert_eq!(e.argument(), "sampling");
        assert!(e.to_string().contains("uniform"));
    }

    #[test]
    fn composition_adds_steps_and_events() {
        let o = [2.0, 4.5, 32.0];
        let e1 = Event { scheme: Scheme::WithoutReplacement, q: 0.01, z: 1.1, steps: 10 };
        let e2 = Event { scheme: Scheme::FullBatch, q: 1.0, z: 5.0, steps: 1 };
        let one = rdp_curve(&Event { steps: 1, ..e1 }, &o).unwrap();
        let ten = rdp_curve(&e1, &o).unwrap();
        for (a, b) in one.iter().zip(&ten) {
            assert!(rel(*b, 10.0 * a) < 1e-12);
        }
        let both = rdp_composed(&[e1, e2], &o).unwrap();
        for (i, a) in o.iter().enumerate() {
            assert!(rel(both[i], ten[i] + a / 50.0) < 1e-12);
        }
        assert_eq!(rdp_composed(&[], &o).unwrap(), vec![0.0; 3]);
    }

    #[test]
    fn every_bad_input_is_an_error_naming_its_argument() {
        let o = default_orders();
        let s = Scheme::WithoutReplacement;
        let cases: Vec<(AccountingError, &str)> = vec![
            (epsilon_for(1.0, 0.0, 1, 1e-5, s, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(1.0, 1.5, 1, 1e-5, s, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(1.0, f64::NAN, 1, 1e-5, s, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(1.0, 0.5, 1, 1e-5, Scheme::FullBatch, &o).unwrap_err(), "sample_rate"),
            (epsilon_for(0.0, 0.1, 1, 1e-5, s, &o).unwrap_err(), "noise_multiplier"),
            (epsilon_for(-1.0, 0.1, 1, 1e-5, s, &o).unwrap_err(), "noise_multiplier"),
            (epsilon_for(f64::NAN, 0.1, 1, 1e-5, s, &o).unwrap_err(), "noise_multiplier"),
            (epsilon_for(1.0, 0.1, 0, 1e-5, s, &o).unwrap_err(), "steps"),
            (epsilon_for(1.0, 0.1, 1, 0.0, s, &o).unwrap_err(), "delta"),
            (epsilon_for(1.0, 0.1, 1, 1.0, s, &o).unwrap_err(), "delta"),
            (delta_for(1.0, 0.1, 1, 0.0, s, &o).unwrap_err(), "epsilon"),
            (delta_for(1.0, 0.1, 1, -1.0, s, &o).unwrap_err(), "epsilon"),
            (noise_multiplier_for(0.0, 1e-5, 0.1, 1, s).unwrap_err(), "epsilon"),
            (noise_multiplier_for(f64::INFINITY, 1e-5, 0.1, 1, s).unwrap_err(), "epsilon"),
            (noise_multiplier_for(1.0, 2.0, 0.1, 1, s).unwrap_err(), "delta"),
            (noise_multiplier_for(1.0, 1e-5, 0.1, 0, s).unwrap_err(), "steps"),
            (epsilon_for(1.0, 0.1, 1, 1e-5, s, &[]).unwrap_err(), "orders"),
            (epsilon_for(1.0, 0.1, 1, 1e-5, s, &[0.5]).unwrap_err(), "orders"),
            (rdp_poisson(0.0, 1.0, 2.0).unwrap_err(), "sample_rate"),
            (rdp_without_replacement(0.1, 0.0, 2.0).unwrap_err(), "noise_multiplier"),
            (rdp_poisson_replace_one(0.1, 1.0, f64::INFINITY).unwrap_err(), "orders"),
        ];
        for (e, arg) in cases {
            assert_eq!(e.argument(), arg, "{e}");
            assert!(!e.to_string().is_empty());
        }
    }
}
