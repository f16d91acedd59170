//! The host's side of the vector accesses: a guarded load that does not read returns zeros and
//! touches nothing, a guarded store that does not write leaves memory as it was, and both move
//! exactly `VEC` elements where they do (the GPU's predicated forms, checked by the GPU tests).

use ferrinfer_kernels::element::{Bf16, Element};
use ferrinfer_kernels::vector::{Kept, Once, Packed};

fn row(n: usize) -> Vec<Bf16> {
    (0..n).map(|i| Bf16::from_f32(i as f32 + 1.0)).collect()
}

fn round_trip<const VEC: usize>() {
    let source = row(16);
    let mut target = vec![Bf16::from_f32(-7.0); 16];
    let loaded = unsafe { Packed::<Bf16, VEC>::load_if::<Once>(true, source.as_ptr().add(VEC)) };
    unsafe { loaded.store_if::<Kept>(true, target.as_mut_ptr().add(VEC)) };
    for (i, value) in target.iter().enumerate() {
        let expected = if (VEC..2 * VEC).contains(&i) { source[i].to_f32() } else { -7.0 };
        assert_eq!(value.to_f32(), expected, "VEC {VEC}, element {i}");
    }
}

#[test]
fn guarded_accesses_move_exactly_their_vector() {
    round_trip::<1>();
    round_trip::<2>();
    round_trip::<4>();
    round_trip::<8>();
}

#[test]
fn guarded_accesses_that_are_off_touch_nothing() {
    // A pointer to nothing: the guard must keep both accesses from dereferencing it.
    let nowhere = core::ptr::null_mut::<Bf16>();
    let zeros = unsafe { Packed::<Bf16, 8>::load_if::<Once>(false, nowhere) };
    assert_eq!(zeros.to_f32(), [0.0; 8]);
    unsafe { Packed::<Bf16, 8>::from_f32([1.0; 8]).store_if::<Kept>(false, nowhere) };
    let mut target = row(8);
    let before: Vec<f32> = target.iter().map(|v| v.to_f32()).collect();
    unsafe { Packed::<Bf16, 8>::from_f32([9.0; 8]).store_if::<Kept>(false, target.as_mut_ptr()) };
    assert_eq!(target.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), before);
}
