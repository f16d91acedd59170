//! The norm family at layer 3: which entry points its PTX must export.

use ferrinfer_kernels::norm::{EntryPoint, RMSNORM_ENTRY_POINTS};

/// Every entry point of the norm family; the builder checks each is in the PTX.
pub fn entry_points() -> impl Iterator<Item = &'static EntryPoint> {
    RMSNORM_ENTRY_POINTS.iter()
}
