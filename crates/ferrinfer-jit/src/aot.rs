//! Ahead of time: build every module some families declare, for each requested architecture,
//! into a directory with the cache's layout — the PTX, and with ptxas the cubin for that arch
//! beside it (a first load then skips the driver's seconds-long PTX compilation). A binary can
//! embed such a directory at build time (`ferrinfer-launch` does, given
//! `FERRINFER_EMBED_AOT_DIR`) or be pointed at one at run time (`FERRINFER_AOT_DIR`).

use std::path::Path;
use std::sync::Arc;

use crate::cache::{Cache, Module, index_entries, read_entry};
use crate::{CudaArch, FAMILIES, JitConfig, JitError};

/// Builds (or finds already built) every spec of `family` (all families if `None`) for each of
/// `archs` into `out`, sharing `config`'s sysroot directory. With ptxas (`config.ptxas`) every
/// entry gets its cubin; an entry built earlier without one is rebuilt.
pub fn build(
    out: &Path,
    archs: &[CudaArch],
    family: Option<&str>,
    config: &JitConfig,
) -> Result<Vec<Arc<Module>>, JitError> {
    let families: Vec<_> = FAMILIES.iter().filter(|f| family.is_none_or(|name| f.name == name)).collect();
    if families.is_empty() {
        let known: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        return Err(JitError::Config {
            var: "--family",
            message: format!("unknown family {family:?}; known: {known:?}"),
        });
    }
    if archs.is_empty() {
        return Err(JitError::Config { var: "--arch", message: "no architecture to build for".into() });
    }
    let mut aot_config = config.clone();
    aot_config.cache_dir = out.to_owned();
    aot_config.aot_dir = None;
    aot_config.disable_jit = false;
    let cache = Cache::new(aot_config, &[]).requiring_cubins();
    let specs = families.iter().flat_map(|f| archs.iter().flat_map(move |&arch| (f.specs)(arch, config.debug)));
    specs.map(|spec| cache.module(&spec)).collect()
}

/// One valid entry of an AOT directory, as a build script embeds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Embeddable {
    pub source_key: String,
    pub arch: CudaArch,
    pub ptx: String,
    /// The cubin for the entry's architecture, where ptxas made one.
    pub cubin: Option<Vec<u8>>,
}

/// Every valid entry in an AOT directory, sorted by key (for embedding: see
/// [`crate::embed::EmbeddedModule`]).
pub fn embeddable(dir: &Path) -> Vec<Embeddable> {
    let mut entries: Vec<Embeddable> = index_entries(dir)
        .into_iter()
        .filter_map(|(source_key, entry)| {
            let stored = read_entry(&entry, &source_key)?;
            let cubin = stored.cubins.first().and_then(|c| c.image()).map(|image| image.to_vec());
            Some(Embeddable { source_key, arch: stored.arch, ptx: Arc::unwrap_or_clone(stored.ptx), cubin })
        })
        .collect();
    entries.sort();
    entries
}
