//! Snapshots of every family's specs and generated entry-point crates (sm_90). A change here is
//! a change to what gets compiled: review it with `cargo insta review`.

use ferrinfer_jit::codegen::generate;
use ferrinfer_jit::{CudaArch, FAMILIES};

/// Per family: every module it declares with each entry point's kernel and generic arguments,
/// and the whole generated crate and spec of its first module.
#[test]
fn jit_generated_sources_and_specs() {
    for family in FAMILIES {
        let specs = (family.specs)(CudaArch::HOPPER, false);
        let mut listing = String::new();
        for spec in &specs {
            listing.push_str(&format!("{}\n", spec.name));
            for entry in &spec.entry_points {
                let cap = entry.max_registers.map_or(String::new(), |r| format!(" maxnreg {r}"));
                listing.push_str(&format!("  {} = {}<{}>{cap}\n", entry.name, entry.kernel, entry.generics.join(", ")));
            }
        }
        insta::assert_snapshot!(format!("{}_modules", family.name), listing);
        let first = &specs[0];
        let generated = generate(first);
        insta::assert_snapshot!(format!("{}_first_spec", family.name), first.to_toml());
        insta::assert_snapshot!(format!("{}_first_lib_rs", family.name), generated.lib_rs);
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
