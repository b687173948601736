//! Per-batch gradients of the FERMI min-max objective for a linear-softmax model.
//!
//! Model. Features `x ∈ R^d` are augmented with a constant, `x̃ = (x, 1)`. The parameters
//! `θ ∈ R^{(d+1)×(l-1)}` (row-major) give logits `z_0 = 0`, `z_v = x̃·θ[:, v-1]` for
//! `v = 1..l-1`, and class probabilities `F(x) = softmax(z) ∈ Δ^l`. Class 0 is the reference
//! class, so `l = 2` is exactly logistic regression, `F = (1-σ(z_1), σ(z_1))`.
//!
//! Objective (Gupta et al. 2024, eq. 4 and App. D). For `W ∈ R^{k×l}` and `q_u = ‖W[:,u]‖²`,
//!
//! ```text
//! ψ_i(θ, W) = -Σ_u F_u(x_i) q_u + 2 p_s(s_i)^{-1/2} (W F(x_i))[s_i] - 1
//! ```
//!
//! and training solves `min_θ max_W  L(θ) + λ · (1/m) Σ_i ψ_i(θ, W)`.
//! Equalized odds uses one `W_y` and `p_{s|y}` per label class; equal opportunity applies the term
//! only to records of the positive class. The divisor is always the batch size `m`, never a count
//! that depends on the data, so that sensitivities stay fixed.
//!
//! Gradients. With `J = ∂F/∂z` (`J_uv = F_u(δ_uv - F_v)`), the chain rule gives, for any vector
//! `g = ∇_F G`, `∇_{θ[:,v-1]} G = x̃ · F_v (g_v - F·g)`. For ψ, `∇_F ψ_i = -q + 2 p_s(s_i)^{-1/2}
//! W[s_i, :]`, whose first part does not depend on `s_i`. Hence the split used for privacy:
//!
//! ```text
//! ∇_θ ψ_i = a_θ,i + b_i,   a_θ,i = x̃ ⊗ J(-q)                  (independent of s)
//!                          b_i   = x̃ ⊗ J(2 p_s(s_i)^{-1/2} W[s_i,:])   (depends on s)
//! ∇_W ψ_i = a_W,i + c_i,   a_W,i = -2 W diag(F_i)              (independent of s)
//!                          c_i   = 2 p_s(s_i)^{-1/2} e_{s_i} F_iᵀ  (depends on s)
//! ```
//!
//! Only `b` and `c` see the sensitive attribute, so only they are clipped and noised (see
//! `docs/privacy.md` for the sensitivities). Because `b_i = x̃ ⊗ β_i` is an outer product,
//! `‖b_i‖_F = ‖x̃‖ ‖β_i‖` and clipping costs O(l) per record.
//!
//! The module in parts: [`types`] (shapes, codes, what a silo protects, the kernel's output),
//! [`predict`] (logits, softmax, predicted classes), `dot` (the dot products whose order of
//! additions every path shares, so that their bits agree) and [`kernel`] (the batch gradients).

pub mod clip_scale;
mod dot;
pub mod kernel;
pub mod predict;
pub mod types;

pub use kernel::{batch_gradients, batch_gradients_adaptive_into, batch_gradients_into, clip_factor, clipped, Workspace};
pub use predict::{
    count_class_one_sparse, predict_class, predict_class_of_proba, predict_class_row, predict_counts, predict_proba, predict_proba_row, softmax_in_place,
};
pub use types::{BatchGradients, Code, Dims, Fairness, Point, Protect, PsiInputs, Records, MAX_CODES};

/// Euclidean norm.
#[inline]
pub fn norm(v: &[f64]) -> f64 {
    v.iter().map(|a| a * a).sum::<f64>().sqrt()
}

#[cfg(test)]
mod tests;
