//! pfair's Rust core. The modules are plain Rust, usable and tested without Python; with the
//! `python` feature (set by maturin) this file also holds the one thin binding layer that
//! exposes them as the extension module `pfair._core`: it converts types, validates shapes,
//! releases the GIL around long work and maps errors to Python exceptions.

pub mod accounting;
pub mod features;
pub mod hybrid;
pub mod noise;
pub mod partition;
pub mod psi;
pub mod round;
pub mod sampling;
pub mod sensitivity;

#[cfg(feature = "python")]
mod python {
    use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    use crate::features::{Dense, Features};
    use crate::hybrid::{self, HybridLayout, HybridNoise};
    use crate::psi::{self, Dims, Fairness, Protect, PsiInputs};
    use crate::round::{self, ServerConfig, Silo, SiloConfig};
    use crate::sampling::Sampling;
    use crate::sensitivity;

    fn err(msg: impl Into<String>) -> PyErr {
        PyValueError::new_err(msg.into())
    }

    // ---------------------------------------------------------------- conversions and checks

    fn fairness_from(name: &str, positive: u32) -> PyResult<Fairness> {
        match name {
            "demographic_parity" => Ok(Fairness::DemographicParity),
            "equalized_odds" => Ok(Fairness::EqualizedOdds),
            "equal_opportunity" => Ok(Fairness::EqualOpportunity { positive }),
            other => Err(err(format!(
                "fairness={other:?} is unknown; use 'demographic_parity', 'equalized_odds' or 'equal_opportunity'"
            ))),
        }
    }

    fn protect_from(name: &str, clip_loss: f64, clip_theta: f64, clip_w: f64) -> PyResult<Protect> {
        for (arg, v) in [("clip_loss", clip_loss), ("clip_theta", clip_theta), ("clip_w", clip_w)] {
            if !(v > 0.0) {
                return Err(err(format!("{arg} must be > 0 (use inf for no clipping), got {v}")));
            }
        }
        match name {
            "attribute" => Ok(Protect::Attribute { clip_theta }),
            "record" => Ok(Protect::Record { clip_loss, clip_theta, clip_w }),
            other => Err(err(format!("protect={other:?} is unknown; use 'attribute' or 'record'"))),
        }
    }

    fn sampling_from(name: &str, batch_size: usize, sample_rate: f64) -> PyResult<Sampling> {
        match name {
            "without_replacement" => {
                if batch_size == 0 {
                    return Err(err("batch_size must be >= 1"));
                }
                Ok(Sampling::WithoutReplacement { m: batch_size })
            }
            "poisson" => {
                if !(sample_rate > 0.0 && sample_rate <= 1.0) {
                    return Err(err(format!("sample_rate must be in (0, 1], got {sample_rate}")));
                }
                Ok(Sampling::Poisson { q: sample_rate })
            }
            "full_batch" => Ok(Sampling::FullBatch),
            other => Err(err(format!(
                "sampling={other:?} is unknown; use 'without_replacement', 'poisson' or 'full_batch'"
            ))),
        }
    }

    /// Checks the shapes of the model state against the problem dimensions.
    fn check_state(dims: Dims, fairness: Fairness, theta: &[f64], w: &[f64], inv: &[f64]) -> PyResult<()> {
        if dims.k < 2 || dims.l < 2 {
            return Err(err(format!("need at least 2 groups and 2 classes, got k={} l={}", dims.k, dims.l)));
        }
        if theta.len() != dims.theta_len() {
            return Err(err(format!("theta has length {}, expected (d+1)(l-1) = {}", theta.len(), dims.theta_len())));
        }
        if w.len() != dims.w_len(fairness) {
            return Err(err(format!("W has {} entries, expected {}", w.len(), dims.w_len(fairness))));
        }
        let want = fairness.n_blocks(dims.l) * dims.k;
        if inv.len() != want {
            return Err(err(format!("inv_sqrt_ps has length {}, expected {want}", inv.len())));
        }
        if inv.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(err("inv_sqrt_ps must be finite and > 0 (every group needs records)"));
        }
        if theta.iter().chain(w).any(|v| !v.is_finite()) {
            return Err(err("theta and W must be finite"));
        }
        Ok(())
    }

    /// Copies one silo's arrays, checking shapes and index ranges; features are stored dense or
    /// CSR, whichever suits their density.
    fn silo_from(x: PyReadonlyArray2<f64>, y: PyReadonlyArray1<i64>, s: PyReadonlyArray1<i64>, k: usize, l: usize) -> PyResult<Silo> {
        let xa = x.as_array();
        let (n, d) = xa.dim();
        let ya = y.as_array();
        let sa = s.as_array();
        if ya.len() != n || sa.len() != n {
            return Err(err(format!("X has {n} rows but y has {} and s has {}", ya.len(), sa.len())));
        }
        let xv: Vec<f64> = xa.iter().copied().collect();
        if xv.iter().any(|v| !v.is_finite()) {
            return Err(err("X contains NaN or inf"));
        }
        let conv = |a: numpy::ndarray::ArrayView1<i64>, hi: usize, what: &str| -> PyResult<Vec<u32>> {
            a.iter()
                .map(|&v| {
                    if v < 0 || v as usize >= hi {
                        Err(err(format!("{what} index {v} out of range 0..{hi}")))
                    } else {
                        Ok(v as u32)
                    }
                })
                .collect()
        };
        Ok(Silo { x: Features::auto(xv, d), y: conv(ya, l, "label")?, s: conv(sa, k, "group")? })
    }

    fn gradients_dict<'py>(py: Python<'py>, g: psi::BatchGradients) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("loss_grad", g.loss_grad.into_pyarray(py))?;
        d.set_item("psi_theta_public", g.psi_theta_public.into_pyarray(py))?;
        d.set_item("psi_theta", g.psi_theta.into_pyarray(py))?;
        d.set_item("psi_w_public", g.psi_w_public.into_pyarray(py))?;
        d.set_item("psi_w", g.psi_w.into_pyarray(py))?;
        d.set_item("loss", g.loss)?;
        d.set_item("psi", g.psi)?;
        d.set_item("n_clipped", g.n_clipped)?;
        Ok(d)
    }

    // ---------------------------------------------------------------- psi / prediction

    /// Class probabilities `F(x)` of the linear-softmax model, `n × l`.
    #[pyfunction]
    fn predict_proba<'py>(
        py: Python<'py>,
        x: PyReadonlyArray2<'py, f64>,
        theta: PyReadonlyArray1<'py, f64>,
        n_classes: usize,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let xa = x.as_array();
        let (n, d) = xa.dim();
        if n_classes < 2 {
            return Err(err("n_classes must be >= 2"));
        }
        let th = theta.as_slice()?.to_vec();
        if th.len() != (d + 1) * (n_classes - 1) {
            return Err(err(format!("theta has length {}, expected (d+1)(l-1) = {}", th.len(), (d + 1) * (n_classes - 1))));
        }
        let xv: Vec<f64> = match x.as_slice() {
            Ok(s) => s.to_vec(),
            Err(_) => xa.iter().copied().collect(),
        };
        let out = py.allow_threads(|| {
            let mut out = vec![0.0; n * n_classes];
            if d == 0 {
                let mut p = vec![0.0; n_classes];
                psi::predict_proba_row(&[], &th, n_classes, &mut p);
                for row in out.chunks_exact_mut(n_classes) {
                    row.copy_from_slice(&p);
                }
            } else {
                psi::predict_proba(&xv, d, &th, n_classes, &mut out);
            }
            out
        });
        Ok(numpy::ndarray::Array2::from_shape_vec((n, n_classes), out)
            .map_err(|e| err(e.to_string()))?
            .into_pyarray(py))
    }

    /// Gradient parts of one batch (no noise), divided by `denom`. For tests and analysis.
    #[pyfunction]
    #[pyo3(signature = (x, y, s, theta, w, inv_sqrt_ps, *, n_groups, n_classes, batch, denom,
                        fairness="demographic_parity", positive=1, protect="attribute",
                        clip_loss=f64::INFINITY, clip_theta=f64::INFINITY, clip_w=f64::INFINITY))]
    #[allow(clippy::too_many_arguments)]
    fn batch_gradients<'py>(
        py: Python<'py>,
        x: PyReadonlyArray2<'py, f64>,
        y: PyReadonlyArray1<'py, i64>,
        s: PyReadonlyArray1<'py, i64>,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        n_groups: usize,
        n_classes: usize,
        batch: PyReadonlyArray1<'py, i64>,
        denom: f64,
        fairness: &str,
        positive: u32,
        protect: &str,
        clip_loss: f64,
        clip_theta: f64,
        clip_w: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fairness = fairness_from(fairness, positive)?;
        let protect = protect_from(protect, clip_loss, clip_theta, clip_w)?;
        let d = x.as_array().dim().1;
        let dims = Dims { d, k: n_groups, l: n_classes };
        let (th, wv, inv) = (theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec());
        check_state(dims, fairness, &th, &wv, &inv)?;
        let xv: Vec<f64> = x.as_array().iter().copied().collect();
        let silo = silo_from(x, y, s, n_groups, n_classes)?;
        let n = silo.len();
        let idx: Vec<usize> = batch
            .as_array()
            .iter()
            .map(|&i| if i < 0 || i as usize >= n { Err(err(format!("batch index {i} out of range 0..{n}"))) } else { Ok(i as usize) })
            .collect::<PyResult<_>>()?;
        if !(denom > 0.0) {
            return Err(err("denom must be > 0"));
        }
        let g = py.allow_threads(|| {
            let rows = Dense { x: &xv, d };
            psi::batch_gradients(&rows, &silo.y, &silo.s, dims, &th, PsiInputs { fairness, w: &wv, inv_sqrt_ps: &inv }, &idx, denom, protect)
        });
        gradients_dict(py, g)
    }

    /// Sensitivities `(loss, theta, w)` of the noised message parts: `relation="replace_one"` gives
    /// the replace-one sensitivities, `"add_remove"` the largest contribution of one record.
    #[pyfunction]
    #[pyo3(signature = (inv_sqrt_ps, *, n_groups, denom, fairness="demographic_parity", positive=1,
                        protect="attribute", clip_loss=f64::INFINITY, clip_theta=1.0, clip_w=f64::INFINITY,
                        relation="replace_one"))]
    #[allow(clippy::too_many_arguments)]
    fn sensitivities(
        inv_sqrt_ps: PyReadonlyArray1<'_, f64>,
        n_groups: usize,
        denom: f64,
        fairness: &str,
        positive: u32,
        protect: &str,
        clip_loss: f64,
        clip_theta: f64,
        clip_w: f64,
        relation: &str,
    ) -> PyResult<(f64, f64, f64)> {
        let fairness = fairness_from(fairness, positive)?;
        let protect = protect_from(protect, clip_loss, clip_theta, clip_w)?;
        let inv = inv_sqrt_ps.as_slice()?;
        if n_groups < 2 || inv.len() % n_groups != 0 || inv.is_empty() {
            return Err(err("inv_sqrt_ps must hold blocks × n_groups entries with n_groups >= 2"));
        }
        if inv.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(err("inv_sqrt_ps must be finite and > 0 (every group needs records)"));
        }
        if !(denom > 0.0) {
            return Err(err("denom must be > 0"));
        }
        let s = match relation {
            "replace_one" => sensitivity::sensitivities(protect, fairness, n_groups, inv, denom),
            "add_remove" => sensitivity::contribution_bounds(protect, inv, denom),
            other => return Err(err(format!("relation={other:?} is unknown; use 'replace_one' or 'add_remove'"))),
        };
        Ok((s.loss, s.theta, s.w))
    }

    /// Noise stds `σ_p = z √P Δ_p` for sensitivities `parts` and effective multiplier `z`.
    #[pyfunction]
    fn noise_stds(parts: Vec<f64>, noise_multiplier: f64) -> PyResult<Vec<f64>> {
        if !(noise_multiplier >= 0.0) {
            return Err(err("noise_multiplier must be >= 0"));
        }
        Ok(sensitivity::noise_stds(&parts, noise_multiplier))
    }

    /// Effective noise multiplier `(Σ_p (Δ_p/σ_p)²)^{-1/2}` of jointly released parts.
    #[pyfunction]
    fn effective_noise_multiplier(parts: Vec<f64>, stds: Vec<f64>) -> PyResult<f64> {
        if parts.len() != stds.len() {
            return Err(err("parts and stds must have the same length"));
        }
        Ok(sensitivity::effective_noise_multiplier(&parts, &stds))
    }

    /// Draws `n` standard-normal numbers from the stream `(seed, silo, round, purpose)`, purpose
    /// `"noise"` (a round's message noise) or `"histogram"` (the DP histogram of s).
    #[pyfunction]
    #[pyo3(signature = (seed, silo, round, n, *, purpose="noise"))]
    fn gaussian_stream<'py>(py: Python<'py>, seed: u64, silo: u64, round: u64, n: usize, purpose: &str) -> PyResult<Bound<'py, PyArray1<f64>>> {
        use crate::noise::{add_gaussian, stream, Purpose};
        let purpose = match purpose {
            "noise" => Purpose::Noise,
            "histogram" => Purpose::Other,
            other => return Err(err(format!("purpose={other:?} is unknown; use 'noise' or 'histogram'"))),
        };
        let mut v = vec![0.0; n];
        add_gaussian(&mut stream(seed, silo, round, purpose), &mut v, 1.0);
        Ok(v.into_pyarray(py))
    }

    // ---------------------------------------------------------------- federation and rounds

    /// How one silo samples, clips and noises (see `round::SiloConfig`).
    #[pyclass(name = "SiloConfig", frozen, module = "pfair._core")]
    #[derive(Clone)]
    struct PySiloConfig {
        inner: SiloConfig,
    }

    #[pymethods]
    impl PySiloConfig {
        #[new]
        #[pyo3(signature = (*, sampling="without_replacement", batch_size=256, sample_rate=1.0,
                            protect="attribute", clip_loss=f64::INFINITY, clip_theta=f64::INFINITY,
                            clip_w=f64::INFINITY, sigma_loss=0.0, sigma_theta=0.0, sigma_w=0.0,
                            send_psi=true))]
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
        ) -> PyResult<Self> {
            for (arg, v) in [("sigma_loss", sigma_loss), ("sigma_theta", sigma_theta), ("sigma_w", sigma_w)] {
                if !(v >= 0.0 && v.is_finite()) {
                    return Err(err(format!("{arg} must be finite and >= 0, got {v}")));
                }
            }
            Ok(PySiloConfig {
                inner: SiloConfig {
                    sampling: sampling_from(sampling, batch_size, sample_rate)?,
                    protect: protect_from(protect, clip_loss, clip_theta, clip_w)?,
                    sigma_loss,
                    sigma_theta,
                    sigma_w,
                    send_psi,
                },
            })
        }

        fn __repr__(&self) -> String {
            format!("SiloConfig({:?})", self.inner)
        }
    }

    /// The silos' data, held in Rust for the whole training run.
    #[pyclass(name = "SiloSet", module = "pfair._core")]
    struct PySiloSet {
        silos: Vec<Silo>,
        dims: Dims,
        fairness: Fairness,
    }

    #[pymethods]
    impl PySiloSet {
        /// `silos` is a list of `(X, y, s)` with `X` float64 `n_j × d`, `y`/`s` int64 indices.
        #[new]
        #[pyo3(signature = (silos, *, n_groups, n_classes, fairness="demographic_parity", positive=1))]
        fn new(
            silos: Vec<(PyReadonlyArray2<'_, f64>, PyReadonlyArray1<'_, i64>, PyReadonlyArray1<'_, i64>)>,
            n_groups: usize,
            n_classes: usize,
            fairness: &str,
            positive: u32,
        ) -> PyResult<Self> {
            let fairness = fairness_from(fairness, positive)?;
            if n_groups < 2 || n_classes < 2 {
                return Err(err(format!("need n_groups >= 2 and n_classes >= 2, got {n_groups} and {n_classes}")));
            }
            if silos.is_empty() {
                return Err(err("need at least one silo"));
            }
            let d = silos[0].0.as_array().dim().1;
            let mut out = Vec::with_capacity(silos.len());
            for (j, (x, y, s)) in silos.into_iter().enumerate() {
                if x.as_array().dim().1 != d {
                    return Err(err(format!("silo {j} has {} features, silo 0 has {d}", x.as_array().dim().1)));
                }
                let silo = silo_from(x, y, s, n_groups, n_classes).map_err(|e| err(format!("silo {j}: {e}")))?;
                if silo.is_empty() {
                    return Err(err(format!("silo {j} has no records")));
                }
                out.push(silo);
            }
            Ok(PySiloSet { silos: out, dims: Dims { d, k: n_groups, l: n_classes }, fairness })
        }

        #[getter]
        fn sizes(&self) -> Vec<usize> {
            self.silos.iter().map(|s| s.len()).collect()
        }

        /// One silo's noised message for `round` (the unit a distributed silo runs).
        #[pyo3(signature = (silo, theta, w, inv_sqrt_ps, config, *, seed, round))]
        #[allow(clippy::too_many_arguments)]
        fn step<'py>(
            &self,
            py: Python<'py>,
            silo: usize,
            theta: PyReadonlyArray1<'py, f64>,
            w: PyReadonlyArray1<'py, f64>,
            inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
            config: &PySiloConfig,
            seed: u64,
            round: u64,
        ) -> PyResult<Bound<'py, PyDict>> {
            let data = self.silos.get(silo).ok_or_else(|| err(format!("silo {silo} out of range 0..{}", self.silos.len())))?;
            let (th, wv, inv) = (theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec());
            check_state(self.dims, self.fairness, &th, &wv, &inv)?;
            check_batch(&config.inner, data.len(), silo)?;
            let (dims, fairness, cfg) = (self.dims, self.fairness, config.inner);
            let msg = py.allow_threads(|| {
                round::silo_step(data, dims, &th, PsiInputs { fairness, w: &wv, inv_sqrt_ps: &inv }, &cfg, seed, silo as u64, round)
            });
            gradients_dict(py, msg)
        }

        /// Runs `n_rounds` SteFFLe rounds from `start`; returns the new `(theta, W)` and
        /// per-round loss, ψ and clipping counts (and the state after `snapshot_round`).
        #[pyo3(signature = (theta, w, inv_sqrt_ps, configs, weights, *, lam, lr_theta, lr_w,
                            w_radius, seed, start, n_rounds, snapshot_round=None))]
        #[allow(clippy::too_many_arguments)]
        fn run_rounds<'py>(
            &self,
            py: Python<'py>,
            theta: PyReadonlyArray1<'py, f64>,
            w: PyReadonlyArray1<'py, f64>,
            inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
            configs: Vec<PySiloConfig>,
            weights: Vec<f64>,
            lam: f64,
            lr_theta: f64,
            lr_w: f64,
            w_radius: f64,
            seed: u64,
            start: u64,
            n_rounds: u64,
            snapshot_round: Option<u64>,
        ) -> PyResult<Bound<'py, PyDict>> {
            let (mut th, mut wv, inv) = (theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec());
            check_state(self.dims, self.fairness, &th, &wv, &inv)?;
            let n = self.silos.len();
            if configs.len() != n || weights.len() != n {
                return Err(err(format!("need one config and one weight per silo ({n}), got {} and {}", configs.len(), weights.len())));
            }
            if weights.iter().any(|v| !(v.is_finite() && *v >= 0.0)) || (weights.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
                return Err(err("weights must be >= 0 and sum to 1"));
            }
            for (j, c) in configs.iter().enumerate() {
                check_batch(&c.inner, self.silos[j].len(), j)?;
            }
            for (arg, v) in [("lam", lam), ("lr_theta", lr_theta), ("lr_w", lr_w)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(err(format!("{arg} must be finite and >= 0, got {v}")));
                }
            }
            if !(w_radius > 0.0) {
                return Err(err("w_radius must be > 0 (inf for no projection)"));
            }
            let cfgs: Vec<SiloConfig> = configs.iter().map(|c| c.inner).collect();
            let server = ServerConfig { lam, lr_theta, lr_w, w_radius };
            let (silos, dims, fairness) = (&self.silos, self.dims, self.fairness);
            let out = py.allow_threads(|| {
                round::run_rounds(silos, dims, &mut th, &mut wv, (fairness, &inv), &cfgs, &weights, &server, seed, start, n_rounds, snapshot_round)
            });
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

    // ---------------------------------------------------------------- hybrid centralization

    /// All records with their non-sensitive holder (`members`) and sensitive holder (`owner`).
    #[pyclass(name = "HybridSet", module = "pfair._core")]
    struct PyHybridSet {
        layout: HybridLayout,
        dims: Dims,
        fairness: Fairness,
    }

    #[pymethods]
    impl PyHybridSet {
        #[new]
        #[pyo3(signature = (x, y, s, members, owner, *, n_sensitive, n_groups, n_classes,
                            fairness="demographic_parity", positive=1))]
        #[allow(clippy::too_many_arguments)]
        fn new(
            x: PyReadonlyArray2<'_, f64>,
            y: PyReadonlyArray1<'_, i64>,
            s: PyReadonlyArray1<'_, i64>,
            members: Vec<PyReadonlyArray1<'_, i64>>,
            owner: PyReadonlyArray1<'_, i64>,
            n_sensitive: usize,
            n_groups: usize,
            n_classes: usize,
            fairness: &str,
            positive: u32,
        ) -> PyResult<Self> {
            let fairness = fairness_from(fairness, positive)?;
            if n_groups < 2 || n_classes < 2 {
                return Err(err("need n_groups >= 2 and n_classes >= 2"));
            }
            let d = x.as_array().dim().1;
            let silo = silo_from(x, y, s, n_groups, n_classes)?;
            let n = silo.len();
            let mut seen = vec![false; n];
            let mut mem = Vec::with_capacity(members.len());
            for (j, m) in members.iter().enumerate() {
                let mut ids = Vec::new();
                for &i in m.as_array().iter() {
                    if i < 0 || i as usize >= n || seen[i as usize] {
                        return Err(err(format!("members[{j}] has id {i}: out of range 0..{n} or held by two silos")));
                    }
                    seen[i as usize] = true;
                    ids.push(i as usize);
                }
                if ids.is_empty() {
                    return Err(err(format!("non-sensitive silo {j} has no records")));
                }
                mem.push(ids);
            }
            if seen.iter().any(|v| !v) {
                return Err(err("every record must belong to exactly one non-sensitive silo"));
            }
            let own = owner.as_array();
            if own.len() != n {
                return Err(err(format!("owner has {} entries, expected {n}", own.len())));
            }
            let own: Vec<u32> = own
                .iter()
                .map(|&c| if c < 0 || c as usize >= n_sensitive { Err(err(format!("owner {c} out of range 0..{n_sensitive}"))) } else { Ok(c as u32) })
                .collect::<PyResult<_>>()?;
            let layout = HybridLayout { x: silo.x, y: silo.y, s: silo.s, members: mem, owner: own, n_sensitive };
            Ok(PyHybridSet { layout, dims: Dims { d, k: n_groups, l: n_classes }, fairness })
        }

        /// One round of messages: the non-sensitive silos' s-free parts and the sensitive silos'
        /// noised sums (None for a silo that sent nothing).
        #[pyo3(signature = (theta, w, inv_sqrt_ps, *, batch_size, clip_theta, sigma_theta, sigma_w,
                            dummy_noise=false, seed, round))]
        #[allow(clippy::too_many_arguments)]
        fn messages<'py>(
            &self,
            py: Python<'py>,
            theta: PyReadonlyArray1<'py, f64>,
            w: PyReadonlyArray1<'py, f64>,
            inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
            batch_size: usize,
            clip_theta: f64,
            sigma_theta: Vec<f64>,
            sigma_w: Vec<f64>,
            dummy_noise: bool,
            seed: u64,
            round: u64,
        ) -> PyResult<Bound<'py, PyDict>> {
            let (th, wv, inv) = (theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec());
            let noise = self.noise(batch_size, clip_theta, sigma_theta, sigma_w, dummy_noise)?;
            check_state(self.dims, self.fairness, &th, &wv, &inv)?;
            let (layout, dims, fairness) = (&self.layout, self.dims, self.fairness);
            let msgs = py.allow_threads(|| {
                hybrid::hybrid_messages(layout, dims, &th, PsiInputs { fairness, w: &wv, inv_sqrt_ps: &inv }, &noise, seed, round)
            });
            let d = PyDict::new(py);
            let public: Vec<Bound<'py, PyDict>> = msgs.public.into_iter().map(|g| gradients_dict(py, g)).collect::<PyResult<_>>()?;
            d.set_item("public", public)?;
            let sens: Vec<Option<(Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>)>> = msgs
                .sensitive
                .into_iter()
                .map(|m| m.map(|(u, v)| (u.into_pyarray(py), v.into_pyarray(py))))
                .collect();
            d.set_item("sensitive", sens)?;
            d.set_item("intersection", msgs.intersection)?;
            d.set_item("union_size", msgs.union_size)?;
            Ok(d)
        }

        /// Runs `n_rounds` hybrid rounds; returns the new `(theta, W)` and per-round loss and ψ.
        #[pyo3(signature = (theta, w, inv_sqrt_ps, *, batch_size, clip_theta, sigma_theta, sigma_w,
                            dummy_noise=false, lam, lr_theta, lr_w, w_radius, seed, start, n_rounds))]
        #[allow(clippy::too_many_arguments)]
        fn run_rounds<'py>(
            &self,
            py: Python<'py>,
            theta: PyReadonlyArray1<'py, f64>,
            w: PyReadonlyArray1<'py, f64>,
            inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
            batch_size: usize,
            clip_theta: f64,
            sigma_theta: Vec<f64>,
            sigma_w: Vec<f64>,
            dummy_noise: bool,
            lam: f64,
            lr_theta: f64,
            lr_w: f64,
            w_radius: f64,
            seed: u64,
            start: u64,
            n_rounds: u64,
        ) -> PyResult<Bound<'py, PyDict>> {
            let (mut th, mut wv, inv) = (theta.as_slice()?.to_vec(), w.as_slice()?.to_vec(), inv_sqrt_ps.as_slice()?.to_vec());
            let noise = self.noise(batch_size, clip_theta, sigma_theta, sigma_w, dummy_noise)?;
            check_state(self.dims, self.fairness, &th, &wv, &inv)?;
            for (arg, v) in [("lam", lam), ("lr_theta", lr_theta), ("lr_w", lr_w)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(err(format!("{arg} must be finite and >= 0, got {v}")));
                }
            }
            if !(w_radius > 0.0) {
                return Err(err("w_radius must be > 0 (inf for no projection)"));
            }
            let server = ServerConfig { lam, lr_theta, lr_w, w_radius };
            let (layout, dims, fairness) = (&self.layout, self.dims, self.fairness);
            let (loss, psi) = py.allow_threads(|| {
                hybrid::run_hybrid_rounds(layout, dims, &mut th, &mut wv, (fairness, &inv), &noise, &server, seed, start, n_rounds)
            });
            let d = PyDict::new(py);
            d.set_item("theta", th.into_pyarray(py))?;
            d.set_item("w", wv.into_pyarray(py))?;
            d.set_item("loss", loss.into_pyarray(py))?;
            d.set_item("psi", psi.into_pyarray(py))?;
            Ok(d)
        }
    }

    impl PyHybridSet {
        fn noise(&self, batch_size: usize, clip_theta: f64, sigma_theta: Vec<f64>, sigma_w: Vec<f64>, dummy_noise: bool) -> PyResult<HybridNoise> {
            let ns = self.layout.n_sensitive;
            if sigma_theta.len() != ns || sigma_w.len() != ns {
                return Err(err(format!("need one sigma_theta and one sigma_w per sensitive silo ({ns})")));
            }
            if sigma_theta.iter().chain(&sigma_w).any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(err("noise stds must be finite and >= 0"));
            }
            if !(clip_theta > 0.0) {
                return Err(err("clip_theta must be > 0 (inf for no clipping)"));
            }
            for (j, m) in self.layout.members.iter().enumerate() {
                if batch_size == 0 || batch_size > m.len() {
                    return Err(err(format!("batch_size={batch_size} must be in 1..={} (non-sensitive silo {j})", m.len())));
                }
            }
            Ok(HybridNoise { batch_size, clip_theta, sigma_theta, sigma_w, dummy_noise })
        }
    }

    fn check_batch(cfg: &SiloConfig, n: usize, silo: usize) -> PyResult<()> {
        if let Sampling::WithoutReplacement { m } = cfg.sampling {
            if m > n {
                return Err(err(format!("batch_size={m} is larger than silo {silo}, which has {n} records")));
            }
        }
        Ok(())
    }

    // ---- accounting bindings (crate::accounting) -------------------------------------------
    // Thin wrappers: convert types, release the GIL around order sweeps and bisection, and map
    // `AccountingError` to `ValueError("<argument>: <message>")`.
    mod accounting_py {
        use crate::accounting::{self as acc, AccountingError, Event, Scheme};
        use pyo3::exceptions::PyValueError;
        use pyo3::prelude::*;

        fn value_error(e: AccountingError) -> PyErr {
            PyValueError::new_err(format!("{}: {}", e.argument(), e))
        }

        fn scheme(name: &str) -> PyResult<Scheme> {
            Scheme::parse(name).map_err(value_error)
        }

        fn orders_or_default(orders: Option<Vec<f64>>) -> Vec<f64> {
            orders.unwrap_or_else(acc::default_orders)
        }

        /// The default RDP orders.
        #[pyfunction]
        pub fn default_orders() -> Vec<f64> {
            acc::default_orders()
        }

        /// Per-step RDP of the Gaussian mechanism, α/(2z²).
        #[pyfunction]
        pub fn rdp_gaussian(noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_gaussian(noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP, Poisson sampling, add/remove adjacency (MTZ 2019).
        #[pyfunction]
        pub fn rdp_poisson(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_poisson(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP, fixed-size sampling without replacement, replace-one (WBK 2019).
        #[pyfunction]
        pub fn rdp_without_replacement(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_without_replacement(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP, Poisson sampling, replace-one adjacency; z against add/remove sensitivity.
        #[pyfunction]
        pub fn rdp_poisson_replace_one(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_poisson_replace_one(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Per-step RDP of a Gaussian on a batch whose membership is public, replace-one.
        #[pyfunction]
        pub fn rdp_public_batch(sample_rate: f64, noise_multiplier: f64, order: f64) -> PyResult<f64> {
            acc::rdp_public_batch(sample_rate, noise_multiplier, order).map_err(value_error)
        }

        /// Total RDP of `steps` steps of one scheme, per order.
        #[pyfunction]
        #[pyo3(signature = (sampling, sample_rate, noise_multiplier, steps, orders=None))]
        pub fn rdp_curve(
            py: Python<'_>,
            sampling: &str,
            sample_rate: f64,
            noise_multiplier: f64,
            steps: u64,
            orders: Option<Vec<f64>>,
        ) -> PyResult<Vec<f64>> {
            let e = Event { scheme: scheme(sampling)?, q: sample_rate, z: noise_multiplier, steps };
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::rdp_curve(&e, &o)).map_err(value_error)
        }

        /// Total RDP of heterogeneous events `(sampling, sample_rate, noise_multiplier, steps)`.
        #[pyfunction]
        #[pyo3(signature = (events, orders=None))]
        pub fn rdp_composed(
            py: Python<'_>,
            events: Vec<(String, f64, f64, u64)>,
            orders: Option<Vec<f64>>,
        ) -> PyResult<Vec<f64>> {
            let evs = events
                .iter()
                .map(|(s, q, z, t)| Ok(Event { scheme: scheme(s)?, q: *q, z: *z, steps: *t }))
                .collect::<PyResult<Vec<Event>>>()?;
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::rdp_composed(&evs, &o)).map_err(value_error)
        }

        /// (ε, optimal order) from an RDP curve (Balle et al. 2020).
        #[pyfunction]
        pub fn epsilon_from_rdp(orders: Vec<f64>, rdp: Vec<f64>, delta: f64) -> PyResult<(f64, f64)> {
            acc::epsilon_from_rdp(&orders, &rdp, delta).map_err(value_error)
        }

        /// (δ, optimal order) from an RDP curve (Balle et al. 2020).
        #[pyfunction]
        pub fn delta_from_rdp(orders: Vec<f64>, rdp: Vec<f64>, epsilon: f64) -> PyResult<(f64, f64)> {
            acc::delta_from_rdp(&orders, &rdp, epsilon).map_err(value_error)
        }

        /// (ε, optimal order) of `steps` steps of one scheme.
        #[pyfunction]
        #[pyo3(signature = (noise_multiplier, sample_rate, steps, delta, sampling, orders=None))]
        pub fn epsilon_for(
            py: Python<'_>,
            noise_multiplier: f64,
            sample_rate: f64,
            steps: u64,
            delta: f64,
            sampling: &str,
            orders: Option<Vec<f64>>,
        ) -> PyResult<(f64, f64)> {
            let s = scheme(sampling)?;
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::epsilon_for(noise_multiplier, sample_rate, steps, delta, s, &o))
                .map_err(value_error)
        }

        /// (δ, optimal order) of `steps` steps of one scheme.
        #[pyfunction]
        #[pyo3(signature = (noise_multiplier, sample_rate, steps, epsilon, sampling, orders=None))]
        pub fn delta_for(
            py: Python<'_>,
            noise_multiplier: f64,
            sample_rate: f64,
            steps: u64,
            epsilon: f64,
            sampling: &str,
            orders: Option<Vec<f64>>,
        ) -> PyResult<(f64, f64)> {
            let s = scheme(sampling)?;
            let o = orders_or_default(orders);
            py.allow_threads(|| acc::delta_for(noise_multiplier, sample_rate, steps, epsilon, s, &o))
                .map_err(value_error)
        }

        /// Smallest-found noise multiplier meeting (ε, δ) (bisection; ε ≤ target, within 2%).
        #[pyfunction]
        pub fn noise_multiplier_for(
            py: Python<'_>,
            epsilon: f64,
            delta: f64,
            sample_rate: f64,
            steps: u64,
            sampling: &str,
        ) -> PyResult<f64> {
            let s = scheme(sampling)?;
            py.allow_threads(|| acc::noise_multiplier_for(epsilon, delta, sample_rate, steps, s))
                .map_err(value_error)
        }

        pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            m.add_function(wrap_pyfunction!(default_orders, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_gaussian, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_poisson, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_without_replacement, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_poisson_replace_one, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_public_batch, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_curve, m)?)?;
            m.add_function(wrap_pyfunction!(rdp_composed, m)?)?;
            m.add_function(wrap_pyfunction!(epsilon_from_rdp, m)?)?;
            m.add_function(wrap_pyfunction!(delta_from_rdp, m)?)?;
            m.add_function(wrap_pyfunction!(epsilon_for, m)?)?;
            m.add_function(wrap_pyfunction!(delta_for, m)?)?;
            m.add_function(wrap_pyfunction!(noise_multiplier_for, m)?)?;
            m.add("CALIBRATION_TOL", crate::accounting::CALIBRATION_TOL)?;
            Ok(())
        }
    }
    // ---- end accounting bindings -------------------------------------------------------------

    // ---- partition (rust/src/partition.rs): partitioners and heterogeneity measures ----------
    //
    // Arrays come in zero-copy as contiguous read-only NumPy views (the Python layer makes them
    // contiguous); the work runs without the GIL; silo ids go back as an int64 array that owns the
    // Rust vector (no copy). A rejected argument becomes `ValueError("<argument>: <why>")`.
    mod partition_bindings {
        use numpy::{PyArray1, PyReadonlyArray1};
        use pyo3::exceptions::PyValueError;
        use pyo3::prelude::*;

        use crate::partition;

        fn value_error(e: partition::PartitionError) -> PyErr {
            PyValueError::new_err(e.to_string())
        }

        fn slice<'a, T: numpy::Element>(name: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
            a.as_slice().map_err(|_| PyValueError::new_err(format!("{name}: must be a contiguous 1-D array")))
        }

        /// Seed 003, Algorithm 3: silo id per record, given the partition attribute `values`.
        #[pyfunction]
        #[pyo3(signature = (values, n_silos, heterogeneity, seed, sizes=None))]
        pub fn partition_heterogeneous<'py>(
            py: Python<'py>,
            values: PyReadonlyArray1<'py, f64>,
            n_silos: usize,
            heterogeneity: f64,
            seed: u64,
            sizes: Option<PyReadonlyArray1<'py, i64>>,
        ) -> PyResult<Bound<'py, PyArray1<i64>>> {
            let v = slice("values", &values)?;
            let s = match &sizes {
                Some(a) => Some(slice("sizes", a)?),
                None => None,
            };
            let ids = py
                .allow_threads(|| partition::heterogeneous(v, n_silos, heterogeneity, s, seed))
                .map_err(value_error)?;
            Ok(PyArray1::from_vec(py, ids))
        }

        /// Dirichlet(alpha) skew of category codes `groups` (in [0, n)); exact `sizes` if given.
        #[pyfunction]
        #[pyo3(signature = (groups, n_silos, alpha, seed, sizes=None))]
        pub fn partition_dirichlet<'py>(
            py: Python<'py>,
            groups: PyReadonlyArray1<'py, i64>,
            n_silos: usize,
            alpha: f64,
            seed: u64,
            sizes: Option<PyReadonlyArray1<'py, i64>>,
        ) -> PyResult<Bound<'py, PyArray1<i64>>> {
            let g = slice("groups", &groups)?;
            let s = match &sizes {
                Some(a) => Some(slice("sizes", a)?),
                None => None,
            };
            let ids = py.allow_threads(|| partition::dirichlet(g, n_silos, alpha, s, seed)).map_err(value_error)?;
            Ok(PyArray1::from_vec(py, ids))
        }

        /// Zipf silo sizes summing exactly to `n`.
        #[pyfunction]
        pub fn partition_power_law_sizes<'py>(
            py: Python<'py>,
            n: usize,
            n_silos: usize,
            exponent: f64,
            min_size: usize,
        ) -> PyResult<Bound<'py, PyArray1<i64>>> {
            let sizes = partition::power_law_sizes(n, n_silos, exponent, min_size).map_err(value_error)?;
            Ok(PyArray1::from_vec(py, sizes.into_iter().map(|s| s as i64).collect()))
        }

        /// Size-weighted mean total-variation distance of the silos' category mix to the pooled one.
        #[pyfunction]
        pub fn partition_heterogeneity_tv(
            py: Python<'_>,
            silo_ids: PyReadonlyArray1<'_, i64>,
            groups: PyReadonlyArray1<'_, i64>,
        ) -> PyResult<f64> {
            let (s, g) = (slice("silo_ids", &silo_ids)?, slice("groups", &groups)?);
            py.allow_threads(|| partition::heterogeneity_tv(s, g)).map_err(value_error)
        }

        /// Correlation ratio (between-silo share of the variance) of `values`.
        #[pyfunction]
        pub fn partition_heterogeneity_eta2(
            py: Python<'_>,
            silo_ids: PyReadonlyArray1<'_, i64>,
            values: PyReadonlyArray1<'_, f64>,
        ) -> PyResult<f64> {
            let (s, v) = (slice("silo_ids", &silo_ids)?, slice("values", &values)?);
            py.allow_threads(|| partition::heterogeneity_eta2(s, v)).map_err(value_error)
        }

        pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            m.add_function(wrap_pyfunction!(partition_heterogeneous, m)?)?;
            m.add_function(wrap_pyfunction!(partition_dirichlet, m)?)?;
            m.add_function(wrap_pyfunction!(partition_power_law_sizes, m)?)?;
            m.add_function(wrap_pyfunction!(partition_heterogeneity_tv, m)?)?;
            m.add_function(wrap_pyfunction!(partition_heterogeneity_eta2, m)?)?;
            Ok(())
        }
    }
    // ---- end partition --------------------------------------------------------------------

    /// The extension module `pfair._core`.
    #[pymodule]
    #[pyo3(name = "_core")]
    fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        // ψ kernels, sensitivities, noise
        m.add_function(wrap_pyfunction!(predict_proba, m)?)?;
        m.add_function(wrap_pyfunction!(batch_gradients, m)?)?;
        m.add_function(wrap_pyfunction!(sensitivities, m)?)?;
        m.add_function(wrap_pyfunction!(noise_stds, m)?)?;
        m.add_function(wrap_pyfunction!(effective_noise_multiplier, m)?)?;
        m.add_function(wrap_pyfunction!(gaussian_stream, m)?)?;
        // federation and rounds
        m.add_class::<PySiloConfig>()?;
        m.add_class::<PySiloSet>()?;
        m.add_class::<PyHybridSet>()?;
        // privacy accounting
        accounting_py::register(m)?;
        // partitioners
        partition_bindings::register(m)?;
        Ok(())
    }
}
