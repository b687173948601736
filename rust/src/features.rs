//! Feature storage of a silo: dense row-major or compressed sparse rows (CSR).
//!
//! Tabular fairness data are mostly one-hot columns (Adult: 102 features, about 14 non-zeros per
//! row), and the ψ kernel touches each batch row twice. Storing such silos as CSR makes both
//! passes proportional to the non-zeros and cuts the memory traffic of random batch rows. The
//! kernels are generic over [`Rows`], so both layouts run the same arithmetic.

/// Row access for the kernels: visit the (column, value) pairs of row `i` that may be non-zero.
pub trait Rows: Sync {
    /// Number of feature columns `d`.
    fn n_features(&self) -> usize;
    /// Number of rows.
    fn n_rows(&self) -> usize;
    /// Calls `f(j, x_ij)` for the stored entries of row `i`, in increasing column order.
    fn for_each<F: FnMut(usize, f64)>(&self, i: usize, f: F);
    /// Hints that row `i` will be read soon (loads its cache lines in the background).
    #[inline]
    fn prefetch_row(&self, _i: usize) {}
    /// Hints that the position of row `i` will be needed soon (CSR row pointers).
    #[inline]
    fn prefetch_meta(&self, _i: usize) {}
}

/// Asks the CPU to load the cache line of `p` (no effect off x86-64; never faults).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults or reads memory architecturally.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the cache lines of `v` (one per 64 bytes).
#[inline(always)]
fn prefetch_slice<T>(v: &[T]) {
    let bytes = std::mem::size_of_val(v);
    let base = v.as_ptr() as *const u8;
    let mut off = 0;
    while off < bytes {
        prefetch(base.wrapping_add(off));
        off += 64;
    }
    if bytes > 0 {
        prefetch(base.wrapping_add(bytes - 1));
    }
}

/// Dense row-major `n × d` features.
#[derive(Clone, Copy, Debug)]
pub struct Dense<'a> {
    pub x: &'a [f64],
    pub d: usize,
}

impl Rows for Dense<'_> {
    fn n_features(&self) -> usize {
        self.d
    }
    fn n_rows(&self) -> usize {
        if self.d == 0 {
            0
        } else {
            self.x.len() / self.d
        }
    }
    #[inline]
    fn for_each<F: FnMut(usize, f64)>(&self, i: usize, mut f: F) {
        for (j, &v) in self.x[i * self.d..(i + 1) * self.d].iter().enumerate() {
            f(j, v);
        }
    }
    #[inline]
    fn prefetch_row(&self, i: usize) {
        if let Some(row) = self.x.get(i * self.d..(i + 1) * self.d) {
            prefetch_slice(row);
        }
    }
}

/// Compressed sparse rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Csr {
    pub indptr: Vec<usize>,
    pub indices: Vec<u32>,
    pub values: Vec<f64>,
    pub d: usize,
}

impl Csr {
    /// CSR copy of a dense row-major matrix, keeping the non-zero entries.
    pub fn from_dense(x: &[f64], d: usize) -> Self {
        let n = if d == 0 { 0 } else { x.len() / d };
        let mut indptr = Vec::with_capacity(n + 1);
        let mut indices = Vec::new();
        let mut values = Vec::new();
        indptr.push(0);
        for row in x.chunks_exact(d.max(1)).take(n) {
            for (j, &v) in row.iter().enumerate() {
                if v != 0.0 {
                    indices.push(j as u32);
                    values.push(v);
                }
            }
            indptr.push(indices.len());
        }
        Csr { indptr, indices, values, d }
    }
}

impl Rows for Csr {
    fn n_features(&self) -> usize {
        self.d
    }
    fn n_rows(&self) -> usize {
        self.indptr.len() - 1
    }
    #[inline]
    fn for_each<F: FnMut(usize, f64)>(&self, i: usize, mut f: F) {
        let (a, b) = (self.indptr[i], self.indptr[i + 1]);
        for (&j, &v) in self.indices[a..b].iter().zip(&self.values[a..b]) {
            f(j as usize, v);
        }
    }
    #[inline]
    fn prefetch_row(&self, i: usize) {
        if let (Some(&a), Some(&b)) = (self.indptr.get(i), self.indptr.get(i + 1)) {
            if let (Some(idx), Some(val)) = (self.indices.get(a..b), self.values.get(a..b)) {
                prefetch_slice(idx);
                prefetch_slice(val);
            }
        }
    }
    #[inline]
    fn prefetch_meta(&self, i: usize) {
        if let Some(p) = self.indptr.get(i) {
            prefetch(p);
        }
    }
}

/// Fraction of non-zero entries.
pub fn density(x: &[f64]) -> f64 {
    if x.is_empty() {
        return 1.0;
    }
    x.iter().filter(|v| **v != 0.0).count() as f64 / x.len() as f64
}

/// A silo's features in the layout that suits them: CSR below this density, dense above.
pub const SPARSE_BELOW_DENSITY: f64 = 0.4;

/// Owned features in either layout.
#[derive(Clone, Debug)]
pub enum Features {
    Dense { x: Vec<f64>, d: usize },
    Sparse(Csr),
}

impl Features {
    /// Picks CSR when the density is below [`SPARSE_BELOW_DENSITY`].
    pub fn auto(x: Vec<f64>, d: usize) -> Self {
        if d > 0 && density(&x) < SPARSE_BELOW_DENSITY {
            Features::Sparse(Csr::from_dense(&x, d))
        } else {
            Features::Dense { x, d }
        }
    }
    pub fn d(&self) -> usize {
        match self {
            Features::Dense { d, .. } => *d,
            Features::Sparse(c) => c.d,
        }
    }
    pub fn is_sparse(&self) -> bool {
        matches!(self, Features::Sparse(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect<R: Rows>(r: &R, i: usize) -> Vec<(usize, f64)> {
        let mut v = Vec::new();
        r.for_each(i, |j, x| v.push((j, x)));
        v
    }

    #[test]
    fn dense_rows_visit_every_column() {
        let x = [1.0, 0.0, 2.0, 0.0, 3.0, 0.0];
        let r = Dense { x: &x, d: 3 };
        assert_eq!((r.n_rows(), r.n_features()), (2, 3));
        assert_eq!(collect(&r, 1), vec![(0, 0.0), (1, 3.0), (2, 0.0)]);
    }

    #[test]
    fn csr_from_dense_keeps_non_zeros_in_order() {
        let x = [1.0, 0.0, 2.0, 0.0, 3.0, 0.0];
        let c = Csr::from_dense(&x, 3);
        assert_eq!(c.indptr, vec![0, 2, 3]);
        assert_eq!(collect(&c, 0), vec![(0, 1.0), (2, 2.0)]);
        assert_eq!(collect(&c, 1), vec![(1, 3.0)]);
        assert_eq!((c.n_rows(), c.n_features()), (2, 3));
    }

    #[test]
    fn density_and_auto_layout() {
        assert_eq!(density(&[0.0, 1.0, 0.0, 0.0]), 0.25);
        assert_eq!(density(&[]), 1.0);
        assert!(Features::auto(vec![0.0, 1.0, 0.0, 0.0], 2).is_sparse());
        assert!(!Features::auto(vec![1.0, 1.0, 0.0, 1.0], 2).is_sparse());
        assert_eq!(Features::auto(vec![1.0; 6], 3).d(), 3);
    }
}
