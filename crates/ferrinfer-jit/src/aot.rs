//! Ahead of time: build every module some families declare, for each requested architecture,
//! into a directory with the cache's layout — the PTX, and with ptxas the cubin for that arch
//! beside it (a first load then skips the driver's seconds-long PTX compilation). A binary can
//! embed such a directory at build time (`ferrinfer-launch` does, given
//! `FERRINFER_EMBED_AOT_DIR`) or be pointed at one at run time (`FERRINFER_AOT_DIR`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::cache::{Cache, Module, index_entries, read_entry};
use crate::{CudaArch, FAMILIES, JitConfig, JitError};

/// Builds (or finds already built) every spec of `family` (all families if `None`) for each of
/// `archs` into `out`, sharing `config`'s sysroot directory, one module a core at a time. With ptxas (`config.ptxas`) every
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
    let specs: Vec<_> =
        families.iter().flat_map(|f| archs.iter().flat_map(move |&arch| (f.specs)(arch, config.debug))).collect();
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    on_workers(specs.len(), workers, |i| cache.module(&specs[i])).into_iter().collect()
}

/// `work(0..count)` on `workers` threads, each taking the next index as it finishes one (a
/// module's build is one rustc and one ptxas, mostly single-threaded: one a core). After a
/// failure no new index starts; the results come back in index order, those never started
/// left out.
fn on_workers<T: Send, E: Send>(
    count: usize,
    workers: usize,
    work: impl Fn(usize) -> Result<T, E> + Sync,
) -> Vec<Result<T, E>> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let mut done: Vec<(usize, Result<T, E>)> = std::thread::scope(|scope| {
        let worker = || {
            let mut results = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let result = work(i);
                failed.fetch_or(result.is_err(), Ordering::Relaxed);
                results.push((i, result));
            }
            results
        };
        let handles: Vec<_> = (0..workers.clamp(1, count.max(1))).map(|_| scope.spawn(worker)).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_return_every_result_in_index_order() {
        let results = on_workers(50, 4, |i| Ok::<_, ()>(i * 2));
        assert_eq!(results, (0..50).map(|i| Ok(i * 2)).collect::<Vec<_>>());
        assert!(on_workers(0, 4, |_| Ok::<u8, ()>(0)).is_empty());
    }

    #[test]
    fn after_a_failure_no_new_work_starts_and_the_failure_is_returned() {
        let started = AtomicUsize::new(0);
        let results = on_workers(1000, 2, |i| {
            started.fetch_add(1, Ordering::Relaxed);
            if i == 5 { Err(i) } else { Ok(i) }
        });
        assert!(results.contains(&Err(5)));
        assert!(started.load(Ordering::Relaxed) < 1000, "work went on after the failure");
        let collected: Result<Vec<usize>, usize> = results.into_iter().collect();
        assert_eq!(collected, Err(5));
    }
}
