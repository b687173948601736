//! Feature storage of a silo: dense row-major or compressed sparse rows (CSR).
//!
//! Tabular fairness data are mostly one-hot columns (Adult: 102 features, about 14 non-zeros per
//! row), and the ψ kernel touches each batch row twice. Storing such silos as CSR makes both
//! passes proportional to the non-zeros and cuts the memory traffic of random batch rows. The
//! kernels are generic over [`Rows`], so both layouts run the same arithmetic.
//!
//! A large federation's silos can also be row subsets of one dense matrix held by someone else
//! (a NumPy array), read in place ([`SharedMatrix`], [`View`]), float64 or float32.

use std::sync::Arc;

/// Row access for the kernels: visit the (column, value) pairs of row `i` that may be non-zero.
pub trait Rows: Sync {
    /// Number of feature columns `d`.
    fn n_features(&self) -> usize;
    /// Number of rows.
    fn n_rows(&self) -> usize;
    /// Calls `f(j, x_ij)` for the stored entries of row `i`, in increasing column order.
    fn for_each<F: FnMut(usize, f64)>(&self, i: usize, f: F);
    /// Row `i` as a dense float64 slice of length `d`, when stored so (kernels then skip the
    /// per-entry visits; the arithmetic is the same).
    #[inline]
    fn dense_row(&self, _i: usize) -> Option<&[f64]> {
        None
    }
    /// Writes row `i` as float64 into `buf` (length `d`) and returns true, when the rows are dense
    /// but not stored as float64 (so [`Rows::dense_row`] is `None`): kernels then take the dense
    /// path, with the same arithmetic as float64 rows of the same values.
    #[inline]
    fn dense_row_into(&self, _i: usize, _buf: &mut [f64]) -> bool {
        false
    }
    /// Row `i`'s stored entries as (columns, values), in increasing column order, when the rows
    /// are stored as compressed sparse rows: the entries [`Rows::for_each`] visits.
    #[inline]
    fn sparse_row(&self, _i: usize) -> Option<(&[u32], &[f64])> {
        None
    }
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
        self.x.len().checked_div(self.d).unwrap_or(0)
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
    #[inline]
    fn dense_row(&self, i: usize) -> Option<&[f64]> {
        Some(&self.x[i * self.d..(i + 1) * self.d])
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
        let n = x.len().checked_div(d).unwrap_or(0);
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
    fn sparse_row(&self, i: usize) -> Option<(&[u32], &[f64])> {
        let (a, b) = (self.indptr[i], self.indptr[i + 1]);
        Some((&self.indices[a..b], &self.values[a..b]))
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

/// A dense row-major `n_rows × d` matrix another owner holds (e.g. a NumPy array), read in
/// place: silos that are row subsets of it need no copy of their features.
pub struct SharedMatrix {
    data: SharedData,
    n_rows: usize,
    d: usize,
    /// Keeps the memory alive (the NumPy array, or a `Vec` for matrices made in Rust).
    _owner: Arc<dyn std::any::Any + Send + Sync>,
}

/// Element type and address of a [`SharedMatrix`].
#[derive(Clone, Copy, Debug)]
enum SharedData {
    F64(*const f64),
    F32(*const f32),
}

// SAFETY: the matrix is only read, and its owner keeps the memory alive and unmoved (the
// constructors' contracts); reads from several threads are then sound.
unsafe impl Send for SharedMatrix {}
unsafe impl Sync for SharedMatrix {}

impl std::fmt::Debug for SharedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_f32() { "f32" } else { "f64" };
        write!(f, "SharedMatrix({} x {}, {kind})", self.n_rows, self.d)
    }
}

impl SharedMatrix {
    /// A matrix at `ptr` (`n_rows · d` float64 values, row-major).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `n_rows · d` values for as long as `owner` lives, and
    /// nothing may write them meanwhile.
    pub unsafe fn from_raw_f64(ptr: *const f64, n_rows: usize, d: usize, owner: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        SharedMatrix { data: SharedData::F64(ptr), n_rows, d, _owner: owner }
    }

    /// As [`SharedMatrix::from_raw_f64`], float32 values (read as float64 by the kernels).
    ///
    /// # Safety
    /// As [`SharedMatrix::from_raw_f64`].
    pub unsafe fn from_raw_f32(ptr: *const f32, n_rows: usize, d: usize, owner: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        SharedMatrix { data: SharedData::F32(ptr), n_rows, d, _owner: owner }
    }

    /// A matrix owning `x` (`len / d` rows).
    pub fn from_vec_f64(x: Vec<f64>, d: usize) -> Self {
        let (ptr, n_rows) = (x.as_ptr(), x.len().checked_div(d).unwrap_or(0));
        // SAFETY: the Vec is the owner; its buffer never moves or changes while it is shared.
        unsafe { SharedMatrix::from_raw_f64(ptr, n_rows, d, Arc::new(x)) }
    }

    /// A matrix owning `x` (`len / d` rows) of float32 values.
    pub fn from_vec_f32(x: Vec<f32>, d: usize) -> Self {
        let (ptr, n_rows) = (x.as_ptr(), x.len().checked_div(d).unwrap_or(0));
        // SAFETY: as in `from_vec_f64`.
        unsafe { SharedMatrix::from_raw_f32(ptr, n_rows, d, Arc::new(x)) }
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn d(&self) -> usize {
        self.d
    }
    pub fn is_f32(&self) -> bool {
        matches!(self.data, SharedData::F32(_))
    }

    /// The float64 values, if that is the element type.
    pub fn as_f64(&self) -> Option<&[f64]> {
        match self.data {
            // SAFETY: the constructors' contract.
            SharedData::F64(p) => Some(unsafe { std::slice::from_raw_parts(p, self.n_rows * self.d) }),
            SharedData::F32(_) => None,
        }
    }

    /// The float32 values, if that is the element type.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self.data {
            // SAFETY: the constructors' contract.
            SharedData::F32(p) => Some(unsafe { std::slice::from_raw_parts(p, self.n_rows * self.d) }),
            SharedData::F64(_) => None,
        }
    }
}

/// Which rows of a shared matrix a silo holds: a contiguous range or a list.
#[derive(Clone, Debug, PartialEq)]
pub enum RowMap {
    Range { start: usize, len: usize },
    List(Vec<u32>),
}

impl RowMap {
    /// The map of `rows`: a range when they are consecutive, a list otherwise.
    /// Rows must be below 2^32 (the bindings check the matrix's size first).
    pub fn from_rows(rows: &[usize]) -> Self {
        Self::from_list(rows.iter().map(|&r| u32::try_from(r).expect("row index below 2^32")).collect())
    }
    /// The map of a row list it takes over: a range when the rows are consecutive.
    pub fn from_list(rows: Vec<u32>) -> Self {
        match (rows.first(), rows.last()) {
            (Some(&a), Some(&b)) if b >= a && (b - a) as usize + 1 == rows.len() && rows.windows(2).all(|w| w[1] == w[0] + 1) => {
                RowMap::Range { start: a as usize, len: rows.len() }
            }
            _ => RowMap::List(rows),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            RowMap::Range { len, .. } => *len,
            RowMap::List(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Row of the matrix that holds the silo's record `i`.
    #[inline]
    pub fn row(&self, i: usize) -> usize {
        match self {
            RowMap::Range { start, .. } => start + i,
            RowMap::List(v) => v[i] as usize,
        }
    }
}

/// A silo's rows of a [`SharedMatrix`].
#[derive(Clone, Debug)]
pub struct SharedRows {
    pub matrix: Arc<SharedMatrix>,
    pub rows: RowMap,
}

/// [`Rows`] of a silo held as rows of a shared dense matrix of `T` (read as float64).
#[derive(Clone, Copy, Debug)]
pub struct View<'a, T> {
    pub x: &'a [T],
    pub d: usize,
    pub rows: &'a RowMap,
}

/// Element types a [`View`] can hold: float64 rows are handed to the kernels as slices.
pub trait Element: Copy + Into<f64> + Sync + 'static {
    fn as_f64_slice(row: &[Self]) -> Option<&[f64]>;
}

impl Element for f64 {
    #[inline]
    fn as_f64_slice(row: &[f64]) -> Option<&[f64]> {
        Some(row)
    }
}

impl Element for f32 {
    #[inline]
    fn as_f64_slice(_row: &[f32]) -> Option<&[f64]> {
        None
    }
}

impl<T: Element> Rows for View<'_, T> {
    fn n_features(&self) -> usize {
        self.d
    }
    fn n_rows(&self) -> usize {
        self.rows.len()
    }
    #[inline]
    fn for_each<F: FnMut(usize, f64)>(&self, i: usize, mut f: F) {
        let r = self.rows.row(i);
        for (j, &v) in self.x[r * self.d..(r + 1) * self.d].iter().enumerate() {
            f(j, v.into());
        }
    }
    #[inline]
    fn prefetch_row(&self, i: usize) {
        if i < self.rows.len() {
            let r = self.rows.row(i);
            if let Some(row) = self.x.get(r * self.d..(r + 1) * self.d) {
                prefetch_slice(row);
            }
        }
    }
    #[inline]
    fn dense_row(&self, i: usize) -> Option<&[f64]> {
        let r = self.rows.row(i);
        T::as_f64_slice(&self.x[r * self.d..(r + 1) * self.d])
    }
    #[inline]
    fn dense_row_into(&self, i: usize, buf: &mut [f64]) -> bool {
        let r = self.rows.row(i);
        for (b, &v) in buf.iter_mut().zip(&self.x[r * self.d..(r + 1) * self.d]) {
            *b = v.into();
        }
        true
    }
    #[inline]
    fn prefetch_meta(&self, i: usize) {
        if let RowMap::List(v) = self.rows {
            if let Some(p) = v.get(i) {
                prefetch(p);
            }
        }
    }
}

/// Features in any layout.
#[derive(Clone, Debug)]
pub enum Features {
    Dense { x: Vec<f64>, d: usize },
    Sparse(Csr),
    /// Rows of a dense matrix held elsewhere (no copy).
    Shared(SharedRows),
}

/// Runs `$body` with `$r` bound to the [`Rows`] of `$features` (each layout monomorphised).
#[macro_export]
macro_rules! with_rows {
    ($features:expr, $r:ident => $body:expr) => {
        match $features {
            $crate::features::Features::Dense { x, d } => {
                let $r = &$crate::features::Dense { x, d: *d };
                $body
            }
            $crate::features::Features::Sparse(csr) => {
                let $r = csr;
                $body
            }
            $crate::features::Features::Shared(sh) => match (sh.matrix.as_f64(), sh.matrix.as_f32()) {
                (Some(x), _) => {
                    let $r = &$crate::features::View { x, d: sh.matrix.d(), rows: &sh.rows };
                    $body
                }
                (None, Some(x)) => {
                    let $r = &$crate::features::View { x, d: sh.matrix.d(), rows: &sh.rows };
                    $body
                }
                (None, None) => unreachable!("a shared matrix is float64 or float32"),
            },
        }
    };
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
            Features::Shared(sh) => sh.matrix.d(),
        }
    }

    /// Mean number of stored entries per row (`d` for dense layouts).
    pub fn entries_per_row(&self) -> f64 {
        match self {
            Features::Sparse(c) => c.values.len() as f64 / c.n_rows().max(1) as f64,
            other => other.d() as f64,
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
    fn shared_views_read_the_rows_they_map() {
        let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let m = SharedMatrix::from_vec_f64(x.clone(), 2);
        assert_eq!((m.n_rows(), m.d(), m.is_f32()), (4, 2, false));
        assert_eq!(RowMap::from_rows(&[1, 2, 3]), RowMap::Range { start: 1, len: 3 });
        assert_eq!(RowMap::from_rows(&[3, 0]), RowMap::List(vec![3, 0]));
        let list = RowMap::from_rows(&[3, 0]);
        let v = View { x: m.as_f64().unwrap(), d: 2, rows: &list };
        assert_eq!((v.n_rows(), v.n_features()), (2, 2));
        assert_eq!(collect(&v, 0), vec![(0, 7.0), (1, 8.0)]);
        assert_eq!(collect(&v, 1), vec![(0, 1.0), (1, 2.0)]);
        let m32 = SharedMatrix::from_vec_f32(vec![0.5f32, 0.1, 2.0, 3.0], 2);
        let range = RowMap::Range { start: 1, len: 1 };
        let v32 = View { x: m32.as_f32().unwrap(), d: 2, rows: &range };
        assert!(m32.is_f32() && m32.as_f64().is_none());
        assert_eq!(collect(&v32, 0), vec![(0, 2.0), (1, 3.0)]);
        assert_eq!(Features::Shared(SharedRows { matrix: Arc::new(m32), rows: range }).d(), 2);
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
