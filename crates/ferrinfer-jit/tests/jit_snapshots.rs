//! Snapshots of every family's specs and generated entry-point crates (sm_90). A change here is
//! a change to what gets compiled: review it with `cargo insta review`.

use ferrinfer_jit::codegen::generate;
use ferrinfer_jit::{CudaArch, FAMILIES};

#[test]
fn jit_generated_sources_and_specs() {
    for family in FAMILIES {
        for spec in (family.specs)(CudaArch::HOPPER, false) {
            let generated = generate(&spec);
            insta::assert_snapshot!(format!("{}_spec", spec.name), spec.to_toml());
            insta::assert_snapshot!(format!("{}_lib_rs", spec.name), generated.lib_rs);
        }
    }
}

#[test]
fn jit_specs_round_trip_through_toml() {
    for family in FAMILIES {
        for spec in (family.specs)(CudaArch::HOPPER, true) {
            assert_eq!(ferrinfer_jit::JitSpec::from_toml(&spec.to_toml()).unwrap(), spec);
        }
    }
}
