//! Validation shared by every op family: row layouts, dtype/device agreement, alignment, overlap,
//! and the vector width a set of tensors allows.

use ferrinfer_jit::spec::IndexType;
use ferrinfer_kernels::element::DType;

use crate::{Device, Error, Stream, TensorView};

/// A tensor argument and its name.
pub(crate) type Named<'a> = (&'static str, &'a TensorView<'a>);

/// The checks every op makes first, in the order a caller would fix them: the stream on the first
/// tensor's device, every other tensor on it, then every tensor aligned to its element. The
/// first tensor is the one errors name as the reference.
pub(crate) fn check_placement<'a, 'v: 'a>(
    stream: &Stream,
    tensors: impl IntoIterator<Item = (&'static str, &'a TensorView<'v>), IntoIter: Clone>,
) -> Result<(), Error> {
    let mut tensors = tensors.into_iter();
    let Some((reference, first)) = tensors.clone().next() else { return Ok(()) };
    let device = first.device();
    if stream.device() != device {
        return Err(Error::DeviceMismatch { argument: "stream", reference, expected: device, found: stream.device() });
    }
    for (name, view) in tensors.clone().skip(1) {
        check_device(name, view, reference, device)?;
    }
    tensors.try_for_each(|(name, view)| check_aligned(name, view))
}

/// A tensor seen as `rows` rows of `hidden` contiguous elements, `row_stride` elements apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowLayout {
    pub rows: u64,
    pub hidden: u64,
    pub row_stride: u64,
}

/// Sees `view` as rows over its last dimension; leading dimensions must collapse into one
/// (each a whole number of the next), rows must not overlap, strides must not be negative.
pub(crate) fn row_layout(argument: &'static str, view: &TensorView) -> Result<RowLayout, Error> {
    let (shape, strides) = (view.shape(), view.strides());
    let unsupported = |reason: String| Error::UnsupportedLayout { argument, reason };
    if shape.is_empty() {
        return Err(unsupported("a 0-dimensional tensor has no rows; expected at least 1 dimension".into()));
    }
    let last = shape.len() - 1;
    if shape.contains(&0) {
        // Nothing to read or write (torch returns an empty result): strides do not matter.
        let rows = shape[..last].iter().product::<i64>() as u64;
        return Ok(RowLayout { rows, hidden: shape[last] as u64, row_stride: shape[last] as u64 });
    }
    if let Some(&s) = strides.iter().find(|&&s| s < 0) {
        return Err(unsupported(format!("negative stride {s}; expected strides ≥ 0")));
    }
    let hidden = shape[last] as u64;
    if hidden > 1 && strides[last] != 1 {
        return Err(Error::LastDimNotContiguous { argument, stride: strides[last] });
    }
    // Leading dimensions of size 1 carry no stride information; skip them.
    let leading: Vec<(u64, u64)> =
        (0..last).filter(|&i| shape[i] != 1).map(|i| (shape[i] as u64, strides[i] as u64)).collect();
    let rows = leading.iter().map(|&(d, _)| d).product::<u64>();
    let row_stride = leading.last().map_or(hidden, |&(_, s)| s);
    for pair in leading.windows(2) {
        let ((_, outer_stride), (inner_dim, inner_stride)) = (pair[0], pair[1]);
        if outer_stride != inner_dim * inner_stride {
            return Err(unsupported(format!(
                "leading dimensions of shape {shape:?} with strides {strides:?} do not collapse into rows"
            )));
        }
    }
    if rows > 1 && row_stride < hidden {
        return Err(unsupported(format!("row stride {row_stride} < row length {hidden}: rows would overlap")));
    }
    Ok(RowLayout { rows, hidden, row_stride })
}

/// [`row_layout`] with a row length of 1 to `u32::MAX` (what the kernels index in 32 bits),
/// `what` naming the last dimension in the errors ("the vocabulary", "head_dim").
pub(crate) fn bounded_rows(argument: &'static str, view: &TensorView, what: &'static str) -> Result<RowLayout, Error> {
    let rows = row_layout(argument, view)?;
    check_row_length(argument, view, rows.hidden, what)?;
    Ok(rows)
}

/// A row length `length` (of `view`'s last dimension, `what`) of 1 to `u32::MAX`.
pub(crate) fn check_row_length(
    argument: &'static str,
    view: &TensorView,
    length: u64,
    what: &'static str,
) -> Result<(), Error> {
    if length == 0 {
        let expected = format!("a last dimension ({what}) of at least 1");
        return Err(Error::ShapeMismatch { argument, expected, found: view.shape().to_vec() });
    }
    if length > u32::MAX as u64 {
        return Err(Error::TooLarge { argument, what, value: length, limit: u32::MAX as u64 });
    }
    Ok(())
}

/// Sees `view` as one sequence of its elements (one value a row of another tensor) at a single
/// stride: every dimension must collapse into the next (each a whole number of it), strides
/// must not be negative. The stride, in elements (1 for a single element).
pub(crate) fn sequence_stride(argument: &'static str, view: &TensorView) -> Result<u64, Error> {
    match collapse(argument, view.shape(), view.strides())? {
        (count, 0) if count > 1 => {
            Err(Error::UnsupportedLayout { argument, reason: "stride 0: every value would be the same element".into() })
        }
        (_, 0) => Ok(1),
        (_, stride) => Ok(stride),
    }
}

/// Dimensions `shape` (with `strides`, a part of `argument`'s) as one: `(count, stride)`, the
/// product of the sizes and the stride of the innermost dimension larger than 1 (0 if none).
/// Each must be a whole number of the next; strides must not be negative.
pub(crate) fn collapse(argument: &'static str, shape: &[i64], strides: &[i64]) -> Result<(u64, u64), Error> {
    let unsupported = |reason: String| Error::UnsupportedLayout { argument, reason };
    let count = shape.iter().product::<i64>() as u64;
    if count == 0 {
        return Ok((0, 0));
    }
    if let Some(&s) = strides.iter().find(|&&s| s < 0) {
        return Err(unsupported(format!("negative stride {s}; expected strides ≥ 0")));
    }
    let dims: Vec<(u64, u64)> =
        (0..shape.len()).filter(|&i| shape[i] > 1).map(|i| (shape[i] as u64, strides[i] as u64)).collect();
    for pair in dims.windows(2) {
        let ((_, outer_stride), (inner_dim, inner_stride)) = (pair[0], pair[1]);
        if outer_stride != inner_dim * inner_stride {
            return Err(unsupported(format!(
                "dimensions {shape:?} with strides {strides:?} do not collapse into one sequence"
            )));
        }
    }
    Ok((count, dims.last().map_or(0, |&(_, stride)| stride)))
}

pub(crate) fn check_dtype(
    argument: &'static str,
    view: &TensorView,
    reference: &'static str,
    expected: DType,
) -> Result<(), Error> {
    match view.dtype() {
        found if found == expected => Ok(()),
        found => Err(Error::DTypeMismatch { argument, reference, expected, found }),
    }
}

pub(crate) fn check_device(
    argument: &'static str,
    view: &TensorView,
    reference: &'static str,
    expected: Device,
) -> Result<(), Error> {
    match view.device() {
        found if found == expected => Ok(()),
        found => Err(Error::DeviceMismatch { argument, reference, expected, found }),
    }
}

pub(crate) fn check_aligned(argument: &'static str, view: &TensorView) -> Result<(), Error> {
    let align = view.dtype().size();
    match view.address() % align as u64 {
        0 => Ok(()),
        _ => Err(Error::Misaligned { argument, address: view.address(), align }),
    }
}

pub(crate) fn check_writable(argument: &'static str, view: &TensorView) -> Result<(), Error> {
    if view.is_writable() { Ok(()) } else { Err(Error::ReadOnly { argument }) }
}

/// The byte range `[start, end)` a view can touch.
fn span(view: &TensorView) -> (u64, u64) {
    let last: u64 = view.shape().iter().zip(view.strides()).map(|(&d, &s)| (d.max(1) as u64 - 1) * s as u64).sum();
    let size = view.dtype().size() as u64;
    (view.address(), view.address() + (last + 1) * size)
}

/// Two non-empty views of one device whose byte ranges intersect.
pub(crate) fn overlaps(a: &TensorView, b: &TensorView) -> bool {
    let ((a0, a1), (b0, b1)) = (span(a), span(b));
    a.device() == b.device() && a.numel() > 0 && b.numel() > 0 && a0 < b1 && b0 < a1
}

/// Every element of a view written by a kernel at an address of its own: its dimensions of more
/// than one element, taken by stride, each step past everything the smaller ones span (a stride
/// of 0, or heads laid over each other, would have two threads write one element).
pub(crate) fn check_distinct_elements(argument: &'static str, view: &TensorView) -> Result<(), Error> {
    let mut dims: Vec<(u64, u64)> = view
        .shape()
        .iter()
        .zip(view.strides())
        .filter(|&(&size, _)| size > 1)
        .map(|(&size, &stride)| (size as u64, stride.max(0) as u64))
        .collect();
    dims.sort_by_key(|&(_, stride)| stride);
    let mut span = 1u64;
    for (size, stride) in dims {
        if stride < span {
            let reason = format!(
                "strides {:?} over shape {:?} make elements share memory; a written tensor needs an address an element",
                view.strides(),
                view.shape()
            );
            return Err(Error::UnsupportedLayout { argument, reason });
        }
        span = span.saturating_add((size - 1).saturating_mul(stride));
    }
    Ok(())
}

/// Two views of one dtype whose rows (first dimension) are one stride apart in both and whose
/// rows' footprints (first element to last, within a row) do not meet: two parts of one packed
/// tensor, such as the q and k of a `qkv` tensor, which [`overlaps`] alone cannot tell apart from
/// tensors that share elements.
pub(crate) fn interleaved_apart(a: &TensorView, b: &TensorView) -> bool {
    let footprint = |v: &TensorView| {
        let inner: i64 = v.shape().iter().zip(v.strides()).skip(1).map(|(&d, &s)| (d.max(1) - 1) * s).sum();
        (inner + 1) as u64 * v.dtype().size() as u64
    };
    let row_bytes = |v: &TensorView| v.strides().first().map_or(0, |&s| s as u64 * v.dtype().size() as u64);
    let (ra, rb) = (row_bytes(a), row_bytes(b));
    let rows = |v: &TensorView| v.shape().first().copied().unwrap_or(1);
    if a.shape().len() != b.shape().len() || rows(a) != rows(b) || ra != rb || a.dtype() != b.dtype() {
        return false;
    }
    let (lo, lo_size, hi, hi_size) = match a.address() <= b.address() {
        true => (a.address(), footprint(a), b.address(), footprint(b)),
        false => (b.address(), footprint(b), a.address(), footprint(a)),
    };
    hi - lo >= lo_size && (rows(a) <= 1 || hi - lo + hi_size <= ra)
}

/// The identical view: same device, address, dtype, shape and strides.
pub(crate) fn same_view(a: &TensorView, b: &TensorView) -> bool {
    (a.device(), a.address(), a.dtype(), a.shape(), a.strides())
        == (b.device(), b.address(), b.dtype(), b.shape(), b.strides())
}

/// The checks of a scalar given as a tensor of one value a row (FlashInfer's "tensor or
/// scalar").
pub(crate) struct PerRowCheck {
    pub argument: &'static str,
    /// The input whose rows it follows.
    pub reference: &'static str,
    /// What each value must be.
    pub expected: &'static str,
}

impl PerRowCheck {
    /// `view` as the `[rows]` tensor of `dtype` on the device of the output `out` (named
    /// `out_name`), contiguous, aligned, apart from `out`; on the CPU every value passes `valid`
    /// (read before anything is written). Values on a GPU are not read (that would wait for the
    /// device): the kernel takes them as they are. Returns its address.
    pub(crate) fn check(
        &self,
        view: &TensorView,
        rows: u64,
        dtype: DType,
        (out_name, out): (&'static str, &TensorView),
        valid: impl Fn(f64) -> bool,
    ) -> Result<u64, Error> {
        let argument = self.argument;
        check_device(argument, view, self.reference, out.device())?;
        if view.dtype() != dtype {
            let expected = format!("{dtype} (one value a row)");
            return Err(Error::UnsupportedDType { argument, found: view.dtype().to_string(), expected });
        }
        if view.shape() != [rows as i64] {
            let expected = format!("[{rows}] (one value a row of `{}`)", self.reference);
            return Err(Error::ShapeMismatch { argument, expected, found: view.shape().to_vec() });
        }
        if rows > 1 && view.strides() != [1] {
            let reason = format!("stride {}; expected the values contiguous (stride 1)", view.strides()[0]);
            return Err(Error::UnsupportedLayout { argument, reason });
        }
        check_aligned(argument, view)?;
        if overlaps(out, view) {
            return Err(Error::Overlap { argument: out_name, other: argument });
        }
        if view.device() == Device::Cpu && rows > 0 {
            // SAFETY: a validated host view: `rows` contiguous elements of `dtype` from its address.
            let bytes =
                unsafe { std::slice::from_raw_parts(view.address() as *const u8, rows as usize * dtype.size()) };
            let values = crate::with_host_element!(dtype, T => bytes
                .chunks_exact(dtype.size())
                .map(|b| <T as crate::HostElement>::to_f64(bytemuck::pod_read_unaligned(b)))
                .collect::<Vec<f64>>());
            if let Some(&value) = values.iter().find(|&&v| !valid(v)) {
                return Err(Error::invalid_scalar(argument, value, self.expected));
            }
        }
        Ok(view.address())
    }
}

/// Element `i` of a host index tensor (int32 or int64) at `base`, `stride` elements apart.
///
/// # Safety
/// `base` must hold that element.
pub(crate) unsafe fn host_index(index: IndexType, base: u64, i: u64, stride: u64) -> i64 {
    let at = base as usize + (i * stride) as usize * if index == IndexType::I64 { 8 } else { 4 };
    unsafe {
        match index {
            IndexType::I64 => (at as *const i64).read_unaligned(),
            IndexType::I32 => (at as *const i32).read_unaligned() as i64,
        }
    }
}

/// The index type of an int32 or int64 tensor (checked before: anything but int64 is int32).
pub(crate) fn index_type(view: &TensorView) -> IndexType {
    match view.dtype() {
        DType::I64 => IndexType::I64,
        _ => IndexType::I32,
    }
}

/// Every value of a 1-D host index tensor, `stride` elements apart.
///
/// # Safety
/// `view` must be a host view holding its elements `stride` apart (validated).
pub(crate) unsafe fn host_indices(view: &TensorView, stride: u64) -> Vec<i64> {
    let count = view.shape().first().copied().unwrap_or(1).max(0) as u64;
    // SAFETY: forwarded to the caller.
    (0..count).map(|i| unsafe { host_index(index_type(view), view.address(), i, stride) }).collect()
}

/// The widest vector (in elements) every access allows: FlashInfer's `gcd(16 / size, hidden)`,
/// narrowed further until it divides every row stride and every address in elements — a tensor
/// that is not 16-byte aligned still runs, with narrower accesses, rather than failing.
pub(crate) fn vector_width(dtype: DType, hidden: u64, row_strides: &[u64], addresses: &[u64]) -> u32 {
    let size = dtype.size() as u64;
    let mut vec = 16 / size;
    while vec > 1
        && (!hidden.is_multiple_of(vec)
            || row_strides.iter().any(|s| !s.is_multiple_of(vec))
            || addresses.iter().any(|a| !a.is_multiple_of(vec * size)))
    {
        vec /= 2;
    }
    vec as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[i64], strides: &[i64]) -> TensorView<'static> {
        unsafe { TensorView::from_raw_parts(4096 as *mut _, 0, DType::F32, shape, strides, Device::Cpu).unwrap() }
    }

    #[test]
    fn rows_collapse_over_leading_dims() {
        let layout = row_layout("x", &view(&[2, 3, 8], &[48, 16, 1])).unwrap();
        assert_eq!(layout, RowLayout { rows: 6, hidden: 8, row_stride: 16 });
        assert_eq!(row_layout("x", &view(&[8], &[1])).unwrap().rows, 1);
        assert_eq!(row_layout("x", &view(&[1, 5, 1, 4], &[0, 4, 99, 1])).unwrap().row_stride, 4);
    }

    #[test]
    fn bad_layouts_name_the_argument() {
        let err = row_layout("input", &view(&[2, 3, 8], &[40, 16, 1])).unwrap_err();
        assert!(err.to_string().starts_with("`input`: unsupported layout"), "{err}");
        assert!(matches!(
            row_layout("w", &view(&[4, 8], &[16, 2])),
            Err(Error::LastDimNotContiguous { argument: "w", stride: 2 })
        ));
        let empty = row_layout("x", &view(&[4, 0], &[1, 1])).unwrap();
        assert_eq!((empty.rows, empty.hidden), (4, 0), "empty rows are no work, not an error");
        assert_eq!(row_layout("x", &view(&[0, 8], &[8, 1])).unwrap().rows, 0);
        assert!(row_layout("x", &view(&[4, 8], &[4, 1])).is_err(), "overlapping rows");
        assert!(row_layout("x", &view(&[4, 8], &[-8, 1])).is_err(), "negative stride");
    }

    #[test]
    fn vector_width_follows_flashinfer_and_narrows_for_alignment() {
        assert_eq!(vector_width(DType::Bf16, 4096, &[4096], &[0, 256]), 8);
        assert_eq!(vector_width(DType::Bf16, 1004, &[1004], &[0]), 4);
        assert_eq!(vector_width(DType::F32, 4096, &[4096], &[0]), 4);
        assert_eq!(vector_width(DType::F16, 111, &[111], &[0]), 1);
        assert_eq!(vector_width(DType::Bf16, 4096, &[4100], &[0]), 4, "row stride");
        assert_eq!(vector_width(DType::Bf16, 4096, &[4096], &[2]), 1, "address");
        assert_eq!(vector_width(DType::Bf16, 4096, &[4096], &[8]), 4, "address");
    }

    #[test]
    fn written_elements_must_not_share_memory() {
        assert!(check_distinct_elements("o", &view(&[4, 2, 8], &[16, 8, 1])).is_ok());
        assert!(check_distinct_elements("o", &view(&[4, 2, 8], &[40, 8, 1])).is_ok(), "padded heads");
        assert!(check_distinct_elements("o", &view(&[4, 1, 8], &[8, 0, 1])).is_ok(), "one head: its stride unused");
        assert!(check_distinct_elements("o", &view(&[4, 2, 8], &[16, 0, 1])).is_err(), "stride 0");
        assert!(check_distinct_elements("o", &view(&[4, 2, 8], &[16, 4, 1])).is_err(), "heads overlap");
        assert!(check_distinct_elements("o", &view(&[4, 2, 8], &[8, 8, 1])).is_err(), "tokens overlap");
        assert!(check_distinct_elements("o", &view(&[2, 8], &[1, 2])).is_ok(), "interleaved, disjoint");
    }

    #[test]
    fn overlap_and_identity() {
        let a = view(&[4, 8], &[8, 1]);
        let b = unsafe { TensorView::from_raw_parts(4096 as *mut _, 64, DType::F32, &[2], &[1], Device::Cpu).unwrap() };
        let c =
            unsafe { TensorView::from_raw_parts(4096 as *mut _, 128, DType::F32, &[2], &[1], Device::Cpu).unwrap() };
        assert!(overlaps(&a, &b) && !overlaps(&a, &c));
        assert!(same_view(&a, &a.clone()) && !same_view(&a, &b));
    }
}
