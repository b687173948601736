//! The domain types of the ψ kernel: shapes, label and group codes, the fairness notion, what a
//! silo protects, the ψ-term's inputs and the gradient parts of a batch.

use crate::config::{check_clips, ConfigError};

/// Fairness notion enforced by the ψ-term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fairness {
    /// Independence of prediction and `s` (one `W`, marginal `p_s`).
    DemographicParity,
    /// Independence given the label: one `W_y` and `p_{s|y}` per class `y`.
    EqualizedOdds,
    /// Independence given `y = positive`; other records do not enter the penalty.
    EqualOpportunity { positive: u32 },
    /// Independence given `y ≠ positive` (false-positive-rate parity: the negatives, `y = 0` for
    /// binary labels); the positive records do not enter the penalty.
    FalsePositiveRateParity { positive: u32 },
}

impl Fairness {
    /// The notion of public name `"demographic_parity"`, `"equalized_odds"`,
    /// `"equal_opportunity"` or `"false_positive_rate_parity"` (with `positive` the positive
    /// class; ignored by the first two). Python's `pfair.notions` has one class per arm.
    pub fn parse(name: &str, positive: u32) -> Result<Self, ConfigError> {
        match name {
            "demographic_parity" => Ok(Fairness::DemographicParity),
            "equalized_odds" => Ok(Fairness::EqualizedOdds),
            "equal_opportunity" => Ok(Fairness::EqualOpportunity { positive }),
            "false_positive_rate_parity" => Ok(Fairness::FalsePositiveRateParity { positive }),
            other => Err(ConfigError::UnknownFairness(other.to_string())),
        }
    }

    /// Number of `W` blocks (`k × l` each).
    pub fn n_blocks(&self, n_classes: usize) -> usize {
        match self {
            Fairness::EqualizedOdds => n_classes,
            _ => 1,
        }
    }

    /// The `W` block a record with label `y` uses, or `None` if it is outside the penalty.
    #[inline]
    pub fn block(&self, y: u32) -> Option<usize> {
        match *self {
            Fairness::DemographicParity => Some(0),
            Fairness::EqualizedOdds => Some(y as usize),
            Fairness::EqualOpportunity { positive } => (y == positive).then_some(0),
            Fairness::FalsePositiveRateParity { positive } => (y != positive).then_some(0),
        }
    }
}

/// A record's label or group index. 16 bits: at 10⁸ records the labels and groups take 0.4 GB,
/// not 0.8 GB as `u32`; problems have at most [`MAX_CODES`] classes and groups.
pub type Code = u16;
/// The most classes, and the most groups, a problem may have (codes are [`Code`]).
pub const MAX_CODES: usize = Code::MAX as usize + 1;

/// Problem shapes: `d` features, `k` sensitive groups, `l` classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub d: usize,
    pub k: usize,
    pub l: usize,
}

impl Dims {
    /// Length of `θ`, `(d+1)(l-1)`.
    pub fn theta_len(&self) -> usize {
        (self.d + 1) * (self.l - 1)
    }
    /// Length of all `W` blocks, `blocks · k · l`.
    pub fn w_len(&self, fairness: Fairness) -> usize {
        fairness.n_blocks(self.l) * self.k * self.l
    }
}

/// How records are protected, i.e. what a neighbouring data set may change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Protect {
    /// Only the sensitive attribute of one record may change (the paper's setting). The loss
    /// gradient and the s-independent ψ parts are exact; `b` is clipped to `clip_theta`.
    Attribute { clip_theta: f64 },
    /// A whole record may change (DP-SGD style). Every per-record gradient is clipped: the loss
    /// gradient to `clip_loss`, `∇_θ ψ_i` to `clip_theta` and `∇_W ψ_i` to `clip_w`.
    Record { clip_loss: f64, clip_theta: f64, clip_w: f64 },
}

impl Protect {
    /// Attribute protection with `b` clipped to `clip_theta > 0` (`inf`: no clipping).
    pub fn attribute(clip_theta: f64) -> Result<Self, ConfigError> {
        check_clips(&[("clip_theta", clip_theta)])?;
        Ok(Protect::Attribute { clip_theta })
    }

    /// Record protection with the three clipping bounds, each > 0 (`inf`: no clipping).
    pub fn record(clip_loss: f64, clip_theta: f64, clip_w: f64) -> Result<Self, ConfigError> {
        check_clips(&[("clip_loss", clip_loss), ("clip_theta", clip_theta), ("clip_w", clip_w)])?;
        Ok(Protect::Record { clip_loss, clip_theta, clip_w })
    }

    /// The mode of public name `"attribute"` or `"record"`. All three bounds are checked first,
    /// whatever the mode (attribute mode uses only `clip_theta`).
    pub fn parse(name: &str, clip_loss: f64, clip_theta: f64, clip_w: f64) -> Result<Self, ConfigError> {
        check_clips(&[("clip_loss", clip_loss), ("clip_theta", clip_theta), ("clip_w", clip_w)])?;
        match name {
            "attribute" => Protect::attribute(clip_theta),
            "record" => Protect::record(clip_loss, clip_theta, clip_w),
            other => Err(ConfigError::UnknownProtect(other.to_string())),
        }
    }

    /// Checks a mode built directly from its variant as its constructor would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Protect::Attribute { clip_theta } => Protect::attribute(clip_theta).map(drop),
            Protect::Record { clip_loss, clip_theta, clip_w } => Protect::record(clip_loss, clip_theta, clip_w).map(drop),
        }
    }
}

/// The ψ-side inputs of a round: the dual variable and the group proportions.
#[derive(Clone, Copy, Debug)]
pub struct PsiInputs<'a> {
    pub fairness: Fairness,
    /// `W`, `blocks × k × l`, row-major.
    pub w: &'a [f64],
    /// `p(s = r | block)^{-1/2}`, `blocks × k`.
    pub inv_sqrt_ps: &'a [f64],
}

/// The point `(θ, W)` a batch's gradients are taken at, with the shapes and the ψ-term's tables.
#[derive(Clone, Copy, Debug)]
pub struct Point<'a> {
    pub dims: Dims,
    pub theta: &'a [f64],
    pub psi: PsiInputs<'a>,
}

/// One silo's records as the kernel reads them: the feature rows, the labels `y` and the groups
/// `s` (one code per row).
#[derive(Debug)]
pub struct Records<'a, R> {
    pub rows: &'a R,
    pub y: &'a [Code],
    pub s: &'a [Code],
}

// By hand: a derive would ask `R: Copy`, but only references are copied.
impl<R> Clone for Records<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Records<'_, R> {}

/// Gradient sums of one batch, each divided by the fixed denominator `m` (before any noise).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchGradients {
    /// `g`: mean loss gradient w.r.t. θ (clipped per record in `Record` mode).
    pub loss_grad: Vec<f64>,
    /// `a_θ`: s-independent part of `∇_θ ψ` (zero in `Record` mode, where it is folded into
    /// `psi_theta`).
    pub psi_theta_sfree: Vec<f64>,
    /// `Σ b̃_i / m`: clipped s-dependent part of `∇_θ ψ` (all of `∇_θ ψ` in `Record` mode).
    pub psi_theta: Vec<f64>,
    /// `a_W`: s-independent part of `∇_W ψ` (zero in `Record` mode).
    pub psi_w_sfree: Vec<f64>,
    /// `Σ c_i / m`: s-dependent part of `∇_W ψ` (all of `∇_W ψ`, clipped, in `Record` mode).
    pub psi_w: Vec<f64>,
    /// Mean cross-entropy over the batch.
    pub loss: f64,
    /// Mean ψ over the batch (divisor `m`).
    pub psi: f64,
    /// How many per-record clippings were active (a silo-local diagnostic, never sent).
    pub n_clipped: usize,
    /// The clip norm `C_θ` the θ-part was clipped to: the config's, or the round's adaptive clip
    /// (a silo-local diagnostic; it reads no `s`).
    pub clip_theta: f64,
}

impl BatchGradients {
    pub fn zeros(dims: Dims, fairness: Fairness) -> Self {
        let t = dims.theta_len();
        let w = dims.w_len(fairness);
        BatchGradients {
            loss_grad: vec![0.0; t],
            psi_theta_sfree: vec![0.0; t],
            psi_theta: vec![0.0; t],
            psi_w_sfree: vec![0.0; w],
            psi_w: vec![0.0; w],
            loss: 0.0,
            psi: 0.0,
            n_clipped: 0,
            clip_theta: 0.0,
        }
    }
}
