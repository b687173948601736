//! Hybrid centralization (`crate::hybrid`): `HybridSet`.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{check_state, gradients_dict, point, silo_from, state_vecs, IndexArray};
use super::kwargs::{self, HybridRoundsArgs};
use super::errors::value_error;
use crate::config::ConfigError;
use crate::hybrid::{self, HybridLayout, HybridNoise, HybridRun};
use crate::psi::{Dims, Fairness};

/// A sensitive silo's message: the noised `(theta, W)` sums, or None if it sent nothing.
type SensitiveMessage<'py> = Option<(Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>)>;

/// All records with their non-sensitive holder (`members`) and sensitive holder (`owner`).
#[pyclass(name = "HybridSet", module = "pfair._core")]
pub(super) struct PyHybridSet {
    layout: HybridLayout,
    dims: Dims,
    fairness: Fairness,
}

#[pymethods]
impl PyHybridSet {
    #[new]
    #[pyo3(signature = (x, y, s, members, owner, *, n_sensitive, n_groups, n_classes,
                        fairness="demographic_parity", positive=1))]
    // One parameter per argument of the Python signature above: positional arguments, or the
    // settings of a constructor or kernel entry point, which stay in the signature Python shows
    // (help, inspect). The per-round bindings read their keywords into structs (kwargs.rs).
    #[allow(clippy::too_many_arguments)]
    fn new(
        x: PyReadonlyArray2<'_, f64>,
        y: IndexArray<'_>,
        s: IndexArray<'_>,
        members: Vec<PyReadonlyArray1<'_, i64>>,
        owner: PyReadonlyArray1<'_, i64>,
        n_sensitive: usize,
        n_groups: usize,
        n_classes: usize,
        fairness: &str,
        positive: u32,
    ) -> PyResult<Self> {
        let fairness = Fairness::parse(fairness, positive)?;
        if n_groups < 2 || n_classes < 2 {
            return Err(value_error("need n_groups >= 2 and n_classes >= 2"));
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
                    return Err(value_error(format!("members[{j}] has id {i}: out of range 0..{n} or held by two silos")));
                }
                seen[i as usize] = true;
                ids.push(i as usize);
            }
            if ids.is_empty() {
                return Err(value_error(format!("non-sensitive silo {j} has no records")));
            }
            mem.push(ids);
        }
        if seen.iter().any(|v| !v) {
            return Err(value_error("every record must belong to exactly one non-sensitive silo"));
        }
        let own = owner.as_array();
        if own.len() != n {
            return Err(value_error(format!("owner has {} entries, expected {n}", own.len())));
        }
        let own: Vec<u32> = own
            .iter()
            .map(|&c| {
                if c < 0 || c as usize >= n_sensitive {
                    Err(value_error(format!("owner {c} out of range 0..{n_sensitive}")))
                } else {
                    Ok(c as u32)
                }
            })
            .collect::<PyResult<_>>()?;
        let layout = HybridLayout { x: silo.x, y: silo.y, s: silo.s, members: mem, owner: own, n_sensitive };
        Ok(PyHybridSet { layout, dims: Dims { d, k: n_groups, l: n_classes }, fairness })
    }

    /// One round of messages: the non-sensitive silos' s-free parts and the sensitive silos'
    /// noised sums (None for a silo that sent nothing). Keyword-only arguments (`kwargs`):
    /// `batch_size`, `clip_theta`, `sigma_theta`, `sigma_w`, `dummy_noise=False`, `noise_keys`,
    /// `batch_key`, `round`.
    #[pyo3(signature = (theta, w, inv_sqrt_ps, **kwargs))]
    fn messages<'py>(
        &self,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let (args, round) = kwargs::hybrid_round(kwargs)?;
        let (th, wv, inv) = state_vecs(&theta, &w, &inv_sqrt_ps)?;
        let batch_key = args.batch_key.clone();
        let noise = self.hybrid_noise(args)?;
        check_state(self.dims, self.fairness, &th, &wv, &inv)?;
        let (layout, dims, fairness) = (&self.layout, self.dims, self.fairness);
        let msgs = py.allow_threads(|| {
            hybrid::hybrid_messages(layout, point(dims, fairness, &th, &wv, &inv), &noise, &batch_key.inner, round)
        });
        let d = PyDict::new(py);
        let non_sensitive: Vec<Bound<'py, PyDict>> =
            msgs.non_sensitive.into_iter().map(|g| gradients_dict(py, g)).collect::<PyResult<_>>()?;
        d.set_item("non_sensitive", non_sensitive)?;
        let sens: Vec<SensitiveMessage<'py>> = msgs
            .sensitive
            .into_iter()
            .map(|m| m.map(|(u, v)| (u.into_pyarray(py), v.into_pyarray(py))))
            .collect();
        d.set_item("sensitive", sens)?;
        d.set_item("intersection", msgs.intersection)?;
        d.set_item("union_size", msgs.union_size)?;
        Ok(d)
    }

    /// Non-sensitive silo `j`'s side of a round: its batch (universal ids, from its secret
    /// `batch_key`), the batch grouped by sensitive owner (what it hands to each sensitive silo), and
    /// its s-free message (means over its batch).
    /// Keyword-only arguments (`kwargs::NonSensitiveArgs`): `batch_size`, `clip_theta`,
    /// `batch_key`, `round`.
    #[pyo3(signature = (j, theta, w, inv_sqrt_ps, **kwargs))]
    fn non_sensitive_step<'py>(
        &self,
        j: usize,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let kwargs::NonSensitiveArgs { batch_size, clip_theta, batch_key, round } = kwargs::non_sensitive(kwargs)?;
        let n_public = self.layout.members.len();
        if j >= n_public {
            return Err(value_error(format!("non-sensitive silo {j} out of range 0..{n_public}")));
        }
        let len_j = self.layout.members[j].len();
        if batch_size == 0 || batch_size > len_j {
            return Err(value_error(format!("batch_size={batch_size} must be in 1..={len_j} (non-sensitive silo {j})")));
        }
        if !crate::config::is_positive(clip_theta) {
            return Err(value_error("clip_theta must be > 0 (inf for no clipping)"));
        }
        let (th, wv, inv) = state_vecs(&theta, &w, &inv_sqrt_ps)?;
        check_state(self.dims, self.fairness, &th, &wv, &inv)?;
        let (layout, dims, fairness) = (&self.layout, self.dims, self.fairness);
        let (batch, by_owner, msg) = py.allow_threads(|| {
            let batch = hybrid::non_sensitive_batch(layout, j, batch_size, &batch_key.inner, round);
            let by_owner = hybrid::split_by_owner(layout, &batch);
            let at = point(dims, fairness, &th, &wv, &inv);
            let msg = hybrid::non_sensitive_message(layout, at, clip_theta, &by_owner, batch_size.min(len_j));
            (batch, by_owner, msg)
        });
        let d = gradients_dict(py, msg)?;
        let ids = |v: Vec<usize>| v.into_iter().map(|i| i as i64).collect::<Vec<_>>();
        d.set_item("batch", ids(batch).into_pyarray(py))?;
        let groups: Vec<Bound<'py, PyArray1<i64>>> = by_owner.into_iter().map(|g| ids(g).into_pyarray(py)).collect();
        d.set_item("by_owner", groups)?;
        Ok(d)
    }

    /// Sensitive silo `c`'s side of a round: the exact sums `(Σ clip(b_i), Σ c_i)` over its
    /// records `groups[j]` in each non-sensitive silo's batch (every id must be one of its own),
    /// plus the round's noise from its `noise_key` when `sigma_theta`/`sigma_w` are given.
    /// Returns `(u, v, count)`.
    /// Keyword-only arguments (`kwargs::SensitiveArgs`): `clip_theta`, `sigma_theta=0.0`,
    /// `sigma_w=0.0`, `noise_key=None`, `round=0`.
    #[pyo3(signature = (c, theta, w, inv_sqrt_ps, groups, **kwargs))]
    #[allow(clippy::type_complexity)]
    fn sensitive_step<'py>(
        &self,
        c: usize,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        groups: Vec<PyReadonlyArray1<'py, i64>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<(Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>, usize)> {
        let py = theta.py();
        let kwargs::SensitiveArgs { clip_theta, sigma_theta, sigma_w, noise_key, round } = kwargs::sensitive(kwargs)?;
        let n_s = self.layout.n_sensitive;
        if c >= n_s {
            return Err(value_error(format!("sensitive silo {c} out of range 0..{n_s}")));
        }
        if !crate::config::is_positive(clip_theta) {
            return Err(value_error("clip_theta must be > 0 (inf for no clipping)"));
        }
        crate::config::check_finite_non_negative(&[("sigma_theta", sigma_theta), ("sigma_w", sigma_w)])
            .map_err(|e| value_error(e.to_string()))?;
        let n = self.layout.owner.len();
        let mut ids = Vec::with_capacity(groups.len());
        for g in &groups {
            let mut v = Vec::with_capacity(g.len()?);
            for &i in g.as_array().iter() {
                if i < 0 || i as usize >= n || self.layout.owner[i as usize] as usize != c {
                    return Err(value_error(format!("record {i} is not held by sensitive silo {c}")));
                }
                v.push(i as usize);
            }
            ids.push(v);
        }
        let (th, wv, inv) = state_vecs(&theta, &w, &inv_sqrt_ps)?;
        check_state(self.dims, self.fairness, &th, &wv, &inv)?;
        let (layout, dims, fairness, n_public) = (&self.layout, self.dims, self.fairness, self.layout.members.len());
        let key = noise_key.map(|k| k.inner);
        let (u, v, count) = py.allow_threads(|| {
            let at = point(dims, fairness, &th, &wv, &inv);
            let (mut u, mut v, count) = hybrid::sensitive_sums(layout, at, clip_theta, &ids);
            if let Some(key) = &key {
                hybrid::noise_sensitive_sums((&mut u, &mut v), (sigma_theta, sigma_w), key, n_public, c, round);
            }
            (u, v, count)
        });
        Ok((u.into_pyarray(py), v.into_pyarray(py), count))
    }

    /// Runs `n_rounds` hybrid rounds; returns the new `(theta, W)` and per-round loss and ψ.
    /// Keyword-only arguments (`kwargs`): `batch_size`, `clip_theta`, `sigma_theta`, `sigma_w`,
    /// `dummy_noise=False`, `noise_keys`, `lam`, `lr_theta`, `lr_w`, `w_radius`, `batch_key`,
    /// `start`, `n_rounds`.
    #[pyo3(signature = (theta, w, inv_sqrt_ps, **kwargs))]
    fn run_rounds<'py>(
        &self,
        theta: PyReadonlyArray1<'py, f64>,
        w: PyReadonlyArray1<'py, f64>,
        inv_sqrt_ps: PyReadonlyArray1<'py, f64>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = theta.py();
        let (step, rounds, args) = kwargs::hybrid_rounds(kwargs)?;
        let (mut th, mut wv, inv) = state_vecs(&theta, &w, &inv_sqrt_ps)?;
        let batch_key = args.batch_key.clone();
        let noise = self.hybrid_noise(args)?;
        check_state(self.dims, self.fairness, &th, &wv, &inv)?;
        let server = step.config()?;
        let run = HybridRun {
            layout: &self.layout,
            dims: self.dims,
            fairness: self.fairness,
            inv_sqrt_ps: &inv,
            noise: &noise,
            server,
            batch_key: &batch_key.inner,
            start: rounds.start,
            n_rounds: rounds.n_rounds,
        };
        let (loss, psi) = py.allow_threads(|| hybrid::run_hybrid_rounds(&run, &mut th, &mut wv));
        let d = PyDict::new(py);
        d.set_item("theta", th.into_pyarray(py))?;
        d.set_item("w", wv.into_pyarray(py))?;
        d.set_item("loss", loss.into_pyarray(py))?;
        d.set_item("psi", psi.into_pyarray(py))?;
        Ok(d)
    }
}

impl PyHybridSet {
    /// The round's noise settings, checked against the layout by `HybridNoise::new` (shared by
    /// `messages` and `run_rounds`).
    fn hybrid_noise(&self, args: HybridRoundsArgs) -> Result<HybridNoise, ConfigError> {
        let keys = args.noise_keys.into_iter().map(|k| k.inner).collect();
        HybridNoise::new(&self.layout, args.batch_size, args.clip_theta, args.sigma_theta, args.sigma_w, args.dummy_noise,
                         keys)
    }
}
