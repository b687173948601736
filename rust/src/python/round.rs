//! Federation and rounds (`crate::round`, `crate::schedule`, `crate::server`): `SiloConfig`,
//! `SiloSet`, the keyed draws of a silo's step (`draw_batch`, `noise_message`) and the server's step.

use std::sync::Arc;

use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{
    check_state, check_theta_len, gradients_dict, index_in, point, silo_from, silos_from_matrix, state_vecs, IndexArray, Indices,
};
use super::kwargs::{self, SiloRoundsArgs};
use super::errors::{value_error, BindResult};
use super::noise::PyNoiseKey;
use crate::features::SharedMatrix;
use crate::psi::{BatchGradients, Dims, Fairness, Protect};
use crate::round::{self, Silo, SiloConfig, SiloKeys};
use crate::sampling::Sampling;
use crate::schedule::{self, RoundsRequest};
use crate::server;
use crate::subspace::{self, Subspace};

/// How one silo samples, clips and noises (see `round::SiloConfig`).
#[pyclass(name = "SiloConfig", frozen, module = "pfair._core")]
#[derive(Clone)]
pub(super) struct PySiloConfig {
    pub(super) inner: SiloConfig,
}

#[pymethods]
impl PySiloConfig {
    #[new]
    #[pyo3(signature = (*, sampling="without_replacement", batch_size=256, sample_rate=1.0,
                        protect="attribute", clip_loss=f64::INFINITY, clip_theta=f64::INFINITY,
                        clip_w=f64::INFINITY, sigma_loss=0.0, sigma_theta=0.0, sigma_w=0.0,
                        send_psi=true, subspace=None, clip_quantile=None, w_row_scale=None))]
    // One parameter per argument of the Python signature above: positional arguments, or the
    // settings of a constructor or kernel entry point, which stay in the signature Python shows
    // (help, inspect). The per-round bindings read their keywords into structs (kwargs.rs).
    #[allow(clippy::too_many_arguments)]
    fn new(
        sampling: &str,
        batch_size: usize,
        sample_rate: f64,
        protect: &str,
        clip_loss: f64,
        clip_theta: f64,
        clip_w: f64,
        sigma_loss: f64,
        sigma_theta: f64,
        sigma_w: f64,
        send_psi: bool,
        subspace: Option<PyReadonlyArray2<'_, f64>>,
        clip_quantile: Option<f64>,
        w_row_scale: Option<PyReadonlyArray1<'_, f64>>,
    ) -> PyResult<Self> {
        // The noise stds are checked before the names are parsed, so their error comes first.
        SiloConfig::check_noise_stds(sigma_loss, sigma_theta, sigma_w)?;
        let sampling = Sampling::parse(sampling, batch_size, sample_rate)?;
        let protect = Protect::parse(protect, clip_loss, clip_theta, clip_w)?;
        let cfg = SiloConfig::new(sampling, protect, sigma_loss, sigma_theta, sigma_w, send_psi)?;
        let cfg = match subspace {
            None => cfg,
            Some(u) => {
                let (rows, rank) = (u.shape()[0], u.shape()[1]);
                cfg.with_subspace(Subspace::new(u.as_array().iter().copied().collect(), rows, rank)?)?
            }
        };
        let cfg = match clip_quantile {
            None => cfg,
            Some(q) => cfg.with_clip_quantile(q)?,
        };
        let cfg = match w_row_scale {
            None => cfg,
            Some(v) => cfg.with_w_row_scale(v.as_array().iter().copied().collect())?,
        };
        Ok(PySiloConfig { inner: cfg })
    }

    /// The adaptive clip quantile of the config, or None (a fixed clip norm).
    #[getter]
    fn clip_quantile(&self) -> Option<f64> {
        self.inner.clip_quantile
    }

    /// The row scales of `h_W`'s noise (`blocks × k`, flat), or None (the same std everywhere).
    #[getter]
    fn w_row_scale<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray1<f64>>> {
        self.inner.w_row_scale.clone().map(|v| v.into_pyarray(py))
    }

    /// The basis `U` ((d+1) × r) of the config's θ subspace, or None.
    #[getter]
    fn subspace<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray2<f64>>> {
        self.inner.subspace.as_ref().map(|s| {
            numpy::ndarray::Array2::from_shape_vec((s.rows(), s.rank()), s.basis().to_vec())
                .expect("a subspace's basis has rows x rank values")
                .into_pyarray(py)
        })
    }

    fn __repr__(&self) -> String {
        format!("SiloConfig({:?})", self.inner)
    }
}

/// A config's θ subspace must have one basis row per row of θ (`d + 1`).
fn check_subspace(cfg: &SiloConfig, dims: Dims, silo: usize) -> BindResult<()> {
    match &cfg.subspace {
        Some(sub) if sub.rows() != dims.d + 1 => Err(format!(
            "silo {silo}: theta_subspace has a basis of {} rows, but theta has d + 1 = {} (one per feature and the \
             intercept)",
            sub.rows(),
            dims.d + 1
        )
        .into()),
        _ => Ok(()),
    }
}

/// A config's row scales of `h_W`'s noise must be the round's `inv_sqrt_ps`, one value per row
/// `(block, group)` of `W`: the noise of a row follows the scale the kernel gives that row, or
/// the sensitivity per unit of `p^{-1/2}` does not hold.
fn check_w_rows(cfg: &SiloConfig, dims: Dims, fairness: Fairness, inv_sqrt_ps: &[f64], silo: usize) -> BindResult<()> {
    match &cfg.w_row_scale {
        Some(scale) if scale.len() != fairness.n_blocks(dims.l) * dims.k => Err(format!(
            "silo {silo}: w_row_scale has {} values, but W has {} rows (one per block and group)",
            scale.len(),
            fairness.n_blocks(dims.l) * dims.k
        )
        .into()),
        Some(scale) if scale.iter().zip(inv_sqrt_ps).any(|(a, b)| (a - b).abs() > 1e-12 * b.abs().max(1.0)) => Err(format!(
            "silo {silo}: w_row_scale must be the round's inv_sqrt_ps (the released p(r|b)^(-1/2)); the config was \
             built for other proportions"
        )
        .into()),
        _ => Ok(()),
    }
}

/// A without-replacement or shuffled batch must fit in its silo.
pub(super) fn check_batch(cfg: &SiloConfig, n: usize, silo: usize) -> BindResult<()> {
    if let Sampling::WithoutReplacement { m } | Sampling::Shuffle { m } = cfg.sampling {
        if m > n {
            return Err(format!("batch_size={m} is larger than silo {silo}, which has {n} records").into());
        }
    }
    Ok(())
}

/// The fairness notion of a silo set, after the checks both of its constructors make first (in
/// this order): the notion's name, at least two groups and classes, at least one silo.
fn check_problem(fairness: &str, positive: u32, n_groups: usize, n_classes: usize, n_silos: usize) -> PyResult<Fairness> {
    let fairness = Fairness::parse(fairness, positive)?;
    if n_groups < 2 || n_classes < 2 {
        return Err(value_error(format!("need n_groups >= 2 and n_classes >= 2, got {n_groups} and {n_classes}")));
    }
    if n_silos == 0 {
        return Err(value_error("need at least one silo"));
    }
    Ok(fairness)
}

/// The silos' data, held in Rust for the whole training run.
#[pyclass(name = "SiloSet", module = "pfair._core")]
pub(super) struct PySiloSet {
    silos: Vec<Silo>,
    dims: Dims,
    fairness: Fairness,
}

#[pymethods]
impl PySiloSet {
    /// `silos` is a list of `(X, y, s)` with `X` float64 `n_j × d`, `y`/`s` int64 or int32 indices.
    #[new]
    #[pyo3(signature = (silos, *, n_groups, n_classes, fairness="demographic_parity", positive=1))]
    fn new(
        silos: Vec<(PyReadonlyArray2<'_, f64>, IndexArray<'_>, IndexArray<'_>)>,
        n_groups: usize,
        n_classes: usize,
        fairness: &str,
        positive: u32,
    ) -> PyResult<Self> {
        let fairness = check_problem(fairness, positive, n_groups, n_classes, silos.len())?;
        let d = silos[0].0.as_array().dim().1;
        let mut out = Vec::with_capacity(silos.len());
        for (j, (x, y, s)) in silos.into_iter().enumerate() {
            if x.as_array().dim().1 != d {
                return Err(value_error(format!("silo {j} has {} features, silo 0 has {d}", x.as_array().dim().1)));
            }
            // The text names the inner error's type, as it did when that error was a `PyErr`.
            let silo = silo_from(x, y, s, n_groups, n_classes).map_err(|e| value_error(format!("silo {j}: ValueError: {e}")))?;
            if silo.is_empty() {
                return Err(value_error(format!("silo {j} has no records")));
            }
            out.push(silo);
        }
        Ok(PySiloSet { silos: out, dims: Dims { d, k: n_groups, l: n_classes }, fairness })
    }

    /// Silos as row subsets of one C-contiguous matrix `x` (`n × d`, float64 or float32), read in
    /// place (no copy) unless the data are sparse (then copied to CSR per silo). `rows[j]` lists
    /// silo `j`'s rows, `y[j]`, `s[j]` their label and group codes (in the same order, so
    /// nothing of length `n` is gathered or scattered). `x` must not be modified while the set is
    /// alive.
    #[staticmethod]
    #[pyo3(signature = (x, y, s, rows, *, n_groups, n_classes, fairness="demographic_parity", positive=1))]
    // One parameter per argument of the Python signature above: positional arguments, or the
    // settings of a constructor or kernel entry point, which stay in the signature Python shows
    // (help, inspect). The per-round bindings read their keywords into structs (kwargs.rs).
    #[allow(clippy::too_many_arguments)]
    fn from_matrix(
        py: Python<'_>,
        x: Bound<'_, PyAny>,
        y: Vec<IndexArray<'_>>,
        s: Vec<IndexArray<'_>>,
        rows: Vec<IndexArray<'_>>,
        n_groups: usize,
        n_classes: usize,
        fairness: &str,
        positive: u32,
    ) -> PyResult<Self> {
        let fairness = check_problem(fairness, positive, n_groups, n_classes, rows.len())?;
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(x.clone().unbind());
        let matrix = if let Ok(a) = x.downcast::<PyArray2<f64>>() {
            let (data, n, d) = c_contiguous(a)?;
            // SAFETY: the array object is the owner and is kept alive by it; its buffer does not
            // move, and the binding's contract says it is not written while the set lives.
            unsafe { SharedMatrix::from_raw_f64(data, n, d, owner) }
        } else if let Ok(a) = x.downcast::<PyArray2<f32>>() {
            let (data, n, d) = c_contiguous(a)?;
            // SAFETY: as above.
            unsafe { SharedMatrix::from_raw_f32(data, n, d, owner) }
        } else {
            return Err(value_error("x must be a 2-D float64 or float32 NumPy array"));
        };
        let d = matrix.d();
        let (ra, ya, sa) = (contiguous(&rows, "rows")?, contiguous(&y, "y")?, contiguous(&s, "s")?);
        let matrix = Arc::new(matrix);
        let silos = py.allow_threads(|| silos_from_matrix(matrix, &ya, &sa, &ra, n_groups, n_classes))?;
        Ok(PySiloSet { silos, dims: Dims { d, k: n_groups, l: n_classes }, fairness })
    }

    /// Whether silo `j`'s features are read in place from a shared matrix (no copy).
    fn is_shared(&self, silo: usize) -> PyResult<bool> {
        Ok(matches!(self.silo(silo)?.x, crate::features::Features::Shared(_)))
    }

    /// `Σ_i x̃_i x̃_iᵀ` over silo `silo`'s records, `x̃ = [x, 1]` ((d+1) × (d+1)): what the basis of
    /// its θ subspace is computed from (`pfair.privacy.subspace`). Silo-local, never sent.
    fn gram<'py>(&self, py: Python<'py>, silo: usize) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let data = self.silo(silo)?;
        let p = self.dims.d + 1;
        let g = py.allow_threads(|| subspace::gram(&data.x));
        Ok(numpy::ndarray::Array2::from_shape_vec((p, p), g).expect("a gram matrix has (d+1)^2 values").into_pyarray(py))
    }

    #[getter]
    fn sizes(&self) -> Vec<usize> {
        self.silos.iter().map(|s| s.len()).collect()
    }

    /// One silo's noised message for `round` (batch from `batch_key`, noise from `noise_key`).
    /// `loss`, `psi` and `n_clipped` in the result are silo-local diagnostics. Keyword-only
    /// arguments (`kwargs::RoundKeys`): `batch_key`, `noise_key`, `round`.
    #[pyo3(signature = (silo, theta, w, inv_sqrt_ps, config, **kwargs))]
    fn step<'py>(
        &self,
        silo: usize,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        config: &PySiloConfig,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let kwargs::RoundKeys { batch_key, noise_key, round } = kwargs::round_keys(kwargs)?;
        let (data, (th, wv, inv)) = self.silo_and_state(silo, &theta, &w, &inv_sqrt_ps)?;
        check_batch(&config.inner, data.len(), silo)?;
        check_subspace(&config.inner, self.dims, silo)?;
        check_w_rows(&config.inner, self.dims, self.fairness, &inv, silo)?;
        let (dims, fairness, cfg) = (self.dims, self.fairness, &config.inner);
        let keys = SiloKeys { batch: batch_key.inner.clone(), noise: noise_key.inner.clone() };
        let msg = py.allow_threads(|| {
            round::silo_step(data, point(dims, fairness, &th, &wv, &inv), cfg, &keys, silo as u64, round)
        });
        gradients_dict(py, msg)
    }

    /// The exact parts of silo `silo`'s records `batch` (no noise), divided by the config's fixed
    /// denominator, clipped as its protection mode requires: the linear model's gradient provider.
    #[pyo3(signature = (silo, theta, w, inv_sqrt_ps, batch, config))]
    fn parts<'py>(
        &self,
        silo: usize,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        batch: PyReadonlyArray1<'py, i64>,
        config: &PySiloConfig,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let (data, (th, wv, inv), idx) = self.silo_state_and_batch(silo, &theta, &w, &inv_sqrt_ps, &batch)?;
        let (dims, fairness, cfg) = (self.dims, self.fairness, &config.inner);
        refuse_adaptive_clip(cfg, "SiloSet.parts")?;
        let denom = cfg.sampling.denominator(data.len());
        let g = py.allow_threads(|| {
            round::silo_parts(data, point(dims, fairness, &th, &wv, &inv), &idx, denom, cfg.protect)
        });
        gradients_dict(py, g)
    }

    /// Silo `silo`'s message on its records `batch` (drawn by the caller) for round `round`: the
    /// parts clipped as the config says (its fixed clip, or the adaptive clip of the batch) with
    /// the round's noise from `key` (`round::noised_batch`). The same arithmetic as `parts` then
    /// `noise_message` for a fixed clip; the one binding that takes an adaptive clip on a given
    /// batch. Keyword-only arguments: `key`, `round`.
    #[pyo3(signature = (silo, theta, w, inv_sqrt_ps, batch, config, *, key, round))]
    // One parameter per argument of the Python signature above (see `PySiloConfig::new`).
    #[allow(clippy::too_many_arguments)]
    fn noised_parts<'py>(
        &self,
        silo: usize,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        batch: PyReadonlyArray1<'py, i64>,
        config: &PySiloConfig,
        key: &PyNoiseKey,
        round: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let (data, (th, wv, inv), idx) = self.silo_state_and_batch(silo, &theta, &w, &inv_sqrt_ps, &batch)?;
        check_subspace(&config.inner, self.dims, silo)?;
        check_w_rows(&config.inner, self.dims, self.fairness, &inv, silo)?;
        let (dims, fairness, cfg) = (self.dims, self.fairness, &config.inner);
        let keys = SiloKeys { batch: key.inner.clone(), noise: key.inner.clone() };
        let msg = py.allow_threads(|| {
            round::noised_batch(data, point(dims, fairness, &th, &wv, &inv), cfg, &keys, silo as u64, round, idx)
        });
        gradients_dict(py, msg)
    }

    /// How many of the silos' sampled records each class is predicted for, all silos together
    /// (`round::predict_counts_strided`): silo `j` reads its rows `0, t, 2t, …` with
    /// `t = ⌈n_j / per_silo⌉`, where they are held; with `thin > 1`, every `thin`-th of those
    /// only (a subset). The collapse check of a fit; silo-local data, never sent.
    #[pyo3(signature = (theta, per_silo, thin=1))]
    fn predict_counts<'py>(
        &self,
        py: Python<'py>,
        theta: PyReadonlyArray1<'py, f64>,
        per_silo: usize,
        thin: usize,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let th = theta.as_slice()?.to_vec();
        check_theta_len(th.len(), self.dims.theta_len())?;
        if per_silo == 0 {
            return Err(value_error("per_silo must be >= 1"));
        }
        if thin == 0 {
            return Err(value_error("thin must be >= 1"));
        }
        let l = self.dims.l;
        let counts = py.allow_threads(|| round::predict_counts_strided(&self.silos, &th, l, per_silo, thin));
        Ok(counts.into_iter().map(|c| c as i64).collect::<Vec<i64>>().into_pyarray(py))
    }

    /// The exact checkpoint counts of the silos `silos` (default: every silo) under `theta`, one
    /// pass over each silo's records where they are held (`crate::checkpoint`): with `table` the
    /// validation tables `V[y, ŷ]` (`len(silos) × l × l`), with `violation` the violation
    /// histograms `c[b, r, ŷ]` (`len(silos) × blocks × k × l`), as float64 arrays (None when not
    /// asked for). Silo-local: a caller releases them only through a charge and noise.
    #[pyo3(signature = (theta, *, table=true, violation=false, silos=None))]
    fn checkpoint_counts<'py>(
        &self,
        py: Python<'py>,
        theta: PyReadonlyArray1<'py, f64>,
        table: bool,
        violation: bool,
        silos: Option<Vec<usize>>,
    ) -> PyResult<CheckpointArrays<'py>> {
        let th = theta.as_slice()?.to_vec();
        check_theta_len(th.len(), self.dims.theta_len())?;
        let which: Vec<usize> = silos.unwrap_or_else(|| (0..self.silos.len()).collect());
        let picked: Vec<&Silo> = which.iter().map(|&j| self.silo(j)).collect::<BindResult<_>>()?;
        let (dims, fairness) = (self.dims, self.fairness);
        let wanted = crate::checkpoint::Wanted { table, violation };
        let counts = py.allow_threads(|| crate::checkpoint::checkpoint_counts(&picked, &th, dims, fairness, wanted));
        let (n, k, l, b) = (which.len(), dims.k, dims.l, fairness.n_blocks(dims.l));
        let tables = if table {
            let flat: Vec<f64> = counts.iter().flat_map(|c| c.table.iter().map(|&v| v as f64)).collect();
            Some(numpy::ndarray::Array3::from_shape_vec((n, l, l), flat).map_err(|e| value_error(e.to_string()))?.into_pyarray(py))
        } else {
            None
        };
        let hists = if violation {
            let flat: Vec<f64> = counts.iter().flat_map(|c| c.violation.iter().map(|&v| v as f64)).collect();
            Some(numpy::ndarray::Array4::from_shape_vec((n, b, k, l), flat).map_err(|e| value_error(e.to_string()))?.into_pyarray(py))
        } else {
            None
        };
        Ok((tables, hists))
    }

    /// Runs `n_rounds` SteFFLe rounds from `start`; returns the new `(theta, W)` and
    /// per-round loss, ψ and clipping counts (and the state after `snapshot_round`).
    /// Keyword-only arguments (`kwargs`): `batch_keys`, `noise_keys` (one per silo), `lam`,
    /// `lr_theta`, `lr_w`, `w_radius`, `start`, `n_rounds`, `snapshot_round=None`.
    #[pyo3(signature = (theta, w, inv_sqrt_ps, configs, weights, **kwargs))]
    fn run_rounds<'py>(
        &self,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        configs: Vec<PySiloConfig>,
        weights: Vec<f64>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let (step, rounds, SiloRoundsArgs { batch_keys, noise_keys, snapshot_round }) = kwargs::silo_rounds(kwargs)?;
        let (mut th, mut wv, inv) = state_vecs(&theta, &w, &inv_sqrt_ps)?;
        check_state(self.dims, self.fairness, &th, &wv, &inv)?;
        let n = self.silos.len();
        if configs.len() != n || weights.len() != n || batch_keys.len() != n || noise_keys.len() != n {
            return Err(value_error(format!(
                "need one config, one weight and one key of each kind per silo ({n}), got {}, {}, {} and {}",
                configs.len(),
                weights.len(),
                batch_keys.len(),
                noise_keys.len()
            )));
        }
        if weights.iter().any(|v| !(v.is_finite() && *v >= 0.0)) || (weights.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
            return Err(value_error("weights must be >= 0 and sum to 1"));
        }
        for (j, c) in configs.iter().enumerate() {
            check_batch(&c.inner, self.silos[j].len(), j)?;
            check_subspace(&c.inner, self.dims, j)?;
            check_w_rows(&c.inner, self.dims, self.fairness, &inv, j)?;
        }
        let server = step.config()?;
        let cfgs: Vec<SiloConfig> = configs.iter().map(|c| c.inner.clone()).collect();
        let keys: Vec<SiloKeys> = batch_keys
            .iter()
            .zip(&noise_keys)
            .map(|(b, z)| SiloKeys { batch: b.inner.clone(), noise: z.inner.clone() })
            .collect();
        let req = RoundsRequest::new(&self.silos, self.dims, (self.fairness, &inv), &cfgs, &keys, &weights, server)
            .rounds(rounds.start, rounds.n_rounds)
            .snapshot(snapshot_round);
        let out = py.allow_threads(|| schedule::run_rounds(&req, &mut th, &mut wv));
        let d = PyDict::new(py);
        d.set_item("theta", th.into_pyarray(py))?;
        d.set_item("w", wv.into_pyarray(py))?;
        d.set_item("loss", out.loss.into_pyarray(py))?;
        d.set_item("psi", out.psi.into_pyarray(py))?;
        d.set_item("clipped", out.clipped)?;
        match out.snapshot {
            Some((t, w)) => d.set_item("snapshot", (t.into_pyarray(py), w.into_pyarray(py)))?,
            None => d.set_item("snapshot", py.None())?,
        }
        Ok(d)
    }
}

/// A checkpoint's validation tables and violation histograms (`SiloSet.checkpoint_counts`).
type CheckpointArrays<'py> = (Option<Bound<'py, numpy::PyArray3<f64>>>, Option<Bound<'py, numpy::PyArray4<f64>>>);

/// θ, W and `p_s^{-1/2}` as copied from their arrays.
type StateVecs = (Vec<f64>, Vec<f64>, Vec<f64>);

impl PySiloSet {
    fn silo(&self, silo: usize) -> BindResult<&Silo> {
        self.silos.get(silo).ok_or_else(|| format!("silo {silo} out of range 0..{}", self.silos.len()).into())
    }

    /// Silo `silo` and the model state `(θ, W, p_s^{-1/2})`, copied and checked against the set
    /// (in this order: the silo's index, then the state).
    fn silo_and_state(
        &self,
        silo: usize,
        theta: &PyReadonlyArray1<'_, f64>,
        w: &PyReadonlyArray1<'_, f64>,
        inv_sqrt_ps: &PyReadonlyArray1<'_, f64>,
    ) -> PyResult<(&Silo, StateVecs)> {
        let data = self.silo(silo)?;
        let (th, wv, inv) = state_vecs(theta, w, inv_sqrt_ps)?;
        check_state(self.dims, self.fairness, &th, &wv, &inv)?;
        Ok((data, (th, wv, inv)))
    }

    /// [`Self::silo_and_state`] and the row indices `batch` of that silo, each checked in range.
    fn silo_state_and_batch(
        &self,
        silo: usize,
        theta: &PyReadonlyArray1<'_, f64>,
        w: &PyReadonlyArray1<'_, f64>,
        inv_sqrt_ps: &PyReadonlyArray1<'_, f64>,
        batch: &PyReadonlyArray1<'_, i64>,
    ) -> PyResult<(&Silo, StateVecs, Vec<usize>)> {
        let (data, state) = self.silo_and_state(silo, theta, w, inv_sqrt_ps)?;
        let n = data.len();
        let idx = batch.as_array().iter().map(|&i| index_in(i, n, "batch")).collect::<BindResult<_>>()?;
        Ok((data, state, idx))
    }
}

/// The five parts of one message as NumPy arrays (`server_update`'s `messages`).
type MessageArrays<'py> = (
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, f64>,
    PyReadonlyArray1<'py, f64>,
);

/// Server step of one round (`server::server_update`) from the silos' messages, each the five
/// parts `(loss_grad, psi_theta_sfree, psi_theta, psi_w_sfree, psi_w)`, with weights summing to
/// 1. Returns the new `(theta, W)`. Keyword-only arguments (`kwargs::ServerStep`): `lam`,
/// `lr_theta`, `lr_w`, `w_radius`.
#[pyfunction]
#[pyo3(signature = (theta, w, block_len, messages, weights, **kwargs))]
#[allow(clippy::type_complexity)]
pub(super) fn server_update<'py>(
    theta: PyReadonlyArray1<'py, f64>,
    w: PyReadonlyArray1<'py, f64>,
    block_len: usize,
    // NumPy arrays, read as slices: extracting `Vec<f64>` goes through Python one float at a time
    // (about 200 µs per round for a 3,000-parameter network's three θ-parts).
    messages: Vec<MessageArrays<'py>>,
    weights: Vec<f64>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(Bound<'py, numpy::PyArray1<f64>>, Bound<'py, numpy::PyArray1<f64>>)> {
    let py = theta.py();
    let server = kwargs::server_step(kwargs)?.config()?;
    let mut th: Vec<f64> = theta.as_array().iter().copied().collect();
    let mut wv: Vec<f64> = w.as_array().iter().copied().collect();
    if messages.len() != weights.len() {
        return Err(value_error(format!("got {} messages but {} weights", messages.len(), weights.len())));
    }
    if weights.iter().any(|v| !(v.is_finite() && *v >= 0.0)) || (weights.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
        return Err(value_error("weights must be >= 0 and sum to 1"));
    }
    if block_len == 0 || wv.len() % block_len != 0 {
        return Err(value_error(format!("W has {} entries, not a multiple of block_len={block_len}", wv.len())));
    }
    let mut msgs = Vec::with_capacity(messages.len());
    for (j, arrays) in messages.iter().enumerate() {
        let [g, at, ht, aw, hw] = [&arrays.0, &arrays.1, &arrays.2, &arrays.3, &arrays.4].map(|a| a.as_array().to_vec());
        if g.len() != th.len() || at.len() != th.len() || ht.len() != th.len() || aw.len() != wv.len() || hw.len() != wv.len() {
            return Err(value_error(format!("message {j}: the θ parts need length {} and the W parts {}", th.len(), wv.len())));
        }
        if g.iter().chain(&at).chain(&ht).chain(&aw).chain(&hw).any(|v| !v.is_finite()) {
            return Err(value_error(format!("message {j} has NaN or inf")));
        }
        msgs.push(BatchGradients { loss_grad: g, psi_theta_sfree: at, psi_theta: ht, psi_w_sfree: aw, psi_w: hw, ..Default::default() });
    }
    server::server_update(&mut th, &mut wv, block_len, &msgs, &weights, &server);
    Ok((th.into_pyarray(py), wv.into_pyarray(py)))
}

/// An error for a binding that takes a batch's parts and its noise apart (`SiloSet.parts`,
/// `noise_message`): the adaptive clip norm is chosen from the batch and scales the noise, so it
/// runs only where both are taken in one step (`SiloSet.step`, `SiloSet.run_rounds`).
fn refuse_adaptive_clip(cfg: &SiloConfig, binding: &str) -> PyResult<()> {
    if cfg.clip_quantile.is_some() {
        return Err(value_error(format!(
            "{binding} takes a fixed clip norm; a config with clip_quantile (the adaptive clip) runs through \
             SiloSet.step or SiloSet.run_rounds, which choose the clip and scale the noise in one step"
        )));
    }
    Ok(())
}

/// Row indices of the batch of silo `silo` (with `n` records) in round `round`, as the sampling of
/// `config` draws it from `key`'s batch stream.
#[pyfunction]
#[pyo3(signature = (config, n, *, key, silo, round))]
pub(super) fn draw_batch<'py>(
    py: Python<'py>,
    config: &PySiloConfig,
    n: usize,
    key: &PyNoiseKey,
    silo: u64,
    round: u64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if n == 0 {
        return Err(value_error("n must be >= 1"));
    }
    if let crate::sampling::Sampling::WithoutReplacement { m } | crate::sampling::Sampling::Shuffle { m } = config.inner.sampling {
        if m > n {
            return Err(value_error(format!("batch_size={m} is larger than the silo, which has {n} records")));
        }
    }
    let keys = SiloKeys { batch: key.inner.clone(), noise: key.inner.clone() };
    let batch = round::draw_batch(&config.inner, &keys, silo, round, n);
    Ok(batch.into_iter().map(|i| i as i64).collect::<Vec<_>>().into_pyarray(py))
}

type Parts<'py> = (
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
);

/// The five exact parts of a batch with the round's noise added (`round::noise_message`): the
/// loss gradient in record mode, then `h_θ`, then `h_W`, from `key`'s stream `(silo, round)`;
/// the ψ parts are zeroed when the config does not send them. Returns new arrays.
/// Keyword-only arguments (`kwargs::NoiseStream`): `key`, `silo`, `round`.
#[pyfunction]
#[pyo3(signature = (loss_grad, psi_theta_sfree, psi_theta, psi_w_sfree, psi_w, config, **kwargs))]
pub(super) fn noise_message<'py>(
    loss_grad: PyReadonlyArray1<'py, f64>,
    psi_theta_sfree: PyReadonlyArray1<'py, f64>,
    psi_theta: PyReadonlyArray1<'py, f64>,
    psi_w_sfree: PyReadonlyArray1<'py, f64>,
    psi_w: PyReadonlyArray1<'py, f64>,
    config: &PySiloConfig,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Parts<'py>> {
    let py = loss_grad.py();
    let kwargs::NoiseStream { key, silo, round } = kwargs::noise_stream(kwargs)?;
    let v = |a: &PyReadonlyArray1<'py, f64>| -> Vec<f64> { a.as_array().iter().copied().collect() };
    let mut msg = BatchGradients {
        loss_grad: v(&loss_grad),
        psi_theta_sfree: v(&psi_theta_sfree),
        psi_theta: v(&psi_theta),
        psi_w_sfree: v(&psi_w_sfree),
        psi_w: v(&psi_w),
        ..Default::default()
    };
    let t = msg.loss_grad.len();
    if msg.psi_theta_sfree.len() != t || msg.psi_theta.len() != t || msg.psi_w_sfree.len() != msg.psi_w.len() {
        return Err(value_error("the θ parts must have one length and the W parts another"));
    }
    if let Some(sub) = &config.inner.subspace {
        if t % sub.rows() != 0 {
            return Err(value_error(format!(
                "theta_subspace has a basis of {} rows, which does not divide the θ parts' length {t}",
                sub.rows()
            )));
        }
    }
    if let Some(scale) = &config.inner.w_row_scale {
        if config.inner.send_psi && msg.psi_w.len() % scale.len() != 0 {
            return Err(value_error(format!(
                "w_row_scale has {} rows, which does not divide the W parts' length {}",
                scale.len(),
                msg.psi_w.len()
            )));
        }
    }
    refuse_adaptive_clip(&config.inner, "noise_message")?;
    let keys = SiloKeys { batch: key.inner.clone(), noise: key.inner.clone() };
    round::noise_message(&mut msg, &config.inner, &keys, silo, round);
    Ok((
        msg.loss_grad.into_pyarray(py),
        msg.psi_theta_sfree.into_pyarray(py),
        msg.psi_theta.into_pyarray(py),
        msg.psi_w_sfree.into_pyarray(py),
        msg.psi_w.into_pyarray(py),
    ))
}

/// How many rows of a float64 or float32 matrix hold a NaN or an infinity: the finiteness check
/// of a feature matrix, in parallel over blocks of rows, without the temporary a NumPy check makes.
#[pyfunction]
pub(super) fn nonfinite_rows(py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<usize> {
    use rayon::prelude::*;
    fn count<T: Copy + Into<f64> + Sync>(data: &[T], d: usize) -> usize {
        data.par_chunks(d * 4096)
            .map(|block| block.chunks(d).filter(|row| row.iter().any(|&v| !v.into().is_finite())).count())
            .sum()
    }
    if let Ok(a) = x.extract::<PyReadonlyArray2<'_, f64>>() {
        let d = a.shape()[1].max(1);
        let data = a.as_slice().map_err(|_| value_error("X must be C-contiguous"))?;
        return Ok(py.allow_threads(|| count(data, d)));
    }
    if let Ok(a) = x.extract::<PyReadonlyArray2<'_, f32>>() {
        let d = a.shape()[1].max(1);
        let data = a.as_slice().map_err(|_| value_error("X must be C-contiguous"))?;
        return Ok(py.allow_threads(|| count(data, d)));
    }
    Err(value_error("X must be a 2-D float64 or float32 array"))
}

/// The buffer of a C-contiguous 2-D array and its shape `(n, d)`. The pointer stays valid as long
/// as the array object lives and is not resized (the caller keeps the object alive).
fn c_contiguous<T: numpy::Element>(a: &Bound<'_, PyArray2<T>>) -> PyResult<(*const T, usize, usize)> {
    let not_contiguous = || value_error("x must be C-contiguous (use numpy.ascontiguousarray)");
    if !a.is_c_contiguous() {
        return Err(not_contiguous());
    }
    let ro = a.readonly();
    let (n, d) = ro.as_array().dim();
    let data = ro.as_slice().map_err(|_| not_contiguous())?;
    Ok((data.as_ptr(), n, d))
}

/// The data of integer arrays, each of which must be contiguous (`name` for the error).
fn contiguous<'a>(v: &'a [IndexArray<'_>], name: &str) -> PyResult<Vec<Indices<'a>>> {
    Ok(v.iter().map(|a| a.indices(name)).collect::<Result<_, _>>()?)
}
