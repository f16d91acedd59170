//! One stored module (a disk-cache or AOT entry): its files, and the checks it passes before it
//! is used. An entry is a directory holding `kernels.ptx`, `kernels.sm_XY.cubin` (where ptxas
//! assembled one), `spec.toml`, `build.log` and `manifest.toml`, written last: what built it,
//! for which arch, and the size and CRC-32 of each file. Loading re-checks all of it against the spec
//! asking — source key, arch, the PTX's `.target` and `.version` lines, for the disk cache also
//! key and toolchain — because a file on disk is only as good as whatever last wrote it. A
//! cubin's size is checked then, its CRC-32 when it is first used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::builder::Ptx;
use crate::ptxas::EntryResources;
use crate::{CudaArch, key};

pub const PTX_FILE: &str = "kernels.ptx";
pub const MANIFEST_FILE: &str = "manifest.toml";

/// Machine code for one architecture, assembled from the module's PTX by ptxas. A stored one is
/// read on first use: a lookup need not read half a megabyte that only a GPU load uses.
#[derive(Clone, Debug)]
pub struct Cubin {
    pub arch: CudaArch,
    image: Arc<OnceLock<Option<Arc<[u8]>>>>,
    /// Where a stored one is, with its size and CRC-32.
    file: Option<(PathBuf, u64, String)>,
}

impl Cubin {
    pub(crate) fn in_memory(arch: CudaArch, image: Vec<u8>) -> Self {
        Cubin { arch, image: Arc::new(OnceLock::from(Some(image.into()))), file: None }
    }

    fn stored(arch: CudaArch, path: PathBuf, bytes: u64, crc32: String) -> Self {
        Cubin { arch, image: Arc::default(), file: Some((path, bytes, crc32)) }
    }

    /// The image; `None` if the stored file is gone or damaged since the lookup (said on
    /// stderr): the caller loads the PTX instead.
    pub fn image(&self) -> Option<Arc<[u8]>> {
        self.image
            .get_or_init(|| {
                let (path, bytes, crc32) = self.file.as_ref()?;
                let (dir, file) = (path.parent()?, path.file_name()?.to_string_lossy());
                read_checked(dir, &file, *bytes, crc32)
                    .map_err(|why| eprintln!("ferrinfer-jit: not using cubin {}: {why}", path.display()))
                    .ok()
                    .map(Arc::from)
            })
            .clone()
    }
}

/// `manifest.toml` of an entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub spec: String,
    pub key: String,
    pub source_key: String,
    pub toolchain: String,
    pub arch: CudaArch,
    /// Built with line info (the PTX's `.target` then ends in `, debug`).
    pub debug: bool,
    pub ptx_version: String,
    pub ptx_bytes: u64,
    pub ptx_crc32: String,
    pub build_seconds: f64,
    #[serde(default)]
    pub ptxas: Vec<EntryResources>,
    #[serde(default)]
    pub cubins: Vec<CubinRecord>,
}

/// One cubin of an entry, as its manifest lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CubinRecord {
    pub arch: CudaArch,
    pub file: String,
    pub bytes: u64,
    pub crc32: String,
    /// `ptxas --version` of the ptxas that assembled it.
    pub ptxas: String,
}

impl CubinRecord {
    pub fn file_name(arch: CudaArch) -> String {
        format!("kernels.{}.cubin", arch.target_cpu())
    }
}

/// What an entry must be to be used.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expected<'a> {
    pub source_key: &'a str,
    /// The spec's arch and debug flag; `None`: the manifest's own (embedding an AOT directory,
    /// no spec at hand).
    pub arch: Option<(CudaArch, bool)>,
    /// The disk cache's key and toolchain; `None` for AOT entries, which another toolchain may
    /// have built (their source key still says what they compile).
    pub built_by: Option<(&'a str, &'a str)>,
    /// Reject an entry without a cubin for its arch (an AOT build that has ptxas).
    pub cubin_required: bool,
}

/// An entry's contents, checked.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    /// The arch the PTX targets (the spec's).
    pub arch: CudaArch,
    pub ptx: Arc<String>,
    pub cubins: Vec<Cubin>,
}

/// Why an entry was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Nothing there: an ordinary miss.
    Missing,
    /// Something there that must not be used, and why.
    Damaged(String),
}

/// The entry in `dir` if it is what `expected` asks for.
pub(crate) fn load(dir: &Path, expected: &Expected) -> Result<Stored, Rejection> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(Rejection::Damaged("a file stands where the entry directory belongs".into())),
        Err(_) => return Err(Rejection::Missing),
    }
    let damaged = |why: String| Rejection::Damaged(why);
    let manifest = read_manifest(dir).map_err(damaged)?;
    check_manifest(&manifest, expected).map_err(damaged)?;
    let ptx = read_checked(dir, PTX_FILE, manifest.ptx_bytes, &manifest.ptx_crc32).map_err(damaged)?;
    let ptx = String::from_utf8(ptx).map_err(|_| damaged(format!("{PTX_FILE} is not text")))?;
    check_header(&ptx, manifest.arch, manifest.debug).map_err(damaged)?;
    let cubins = manifest.cubins.iter().map(|c| stored_cubin(dir, c)).collect::<Result<Vec<_>, String>>();
    let cubins = cubins.map_err(damaged)?;
    if expected.cubin_required && !cubins.iter().any(|c| c.arch == manifest.arch) {
        return Err(damaged(format!("it has no cubin for {} (built without ptxas)", manifest.arch.target_cpu())));
    }
    Ok(Stored { arch: manifest.arch, ptx: Arc::new(ptx), cubins })
}

/// A cubin the manifest lists, if its file has the listed size (its CRC-32 is checked when it
/// is read).
fn stored_cubin(dir: &Path, record: &CubinRecord) -> Result<Cubin, String> {
    let path = dir.join(&record.file);
    let len = std::fs::metadata(&path).map_err(|e| format!("{} is unreadable ({e})", record.file))?.len();
    if len != record.bytes {
        return Err(format!(
            "{} has {len} bytes, its manifest says {} (truncated or edited)",
            record.file, record.bytes
        ));
    }
    Ok(Cubin::stored(record.arch, path, record.bytes, record.crc32.clone()))
}

pub(crate) fn read_manifest(dir: &Path) -> Result<Manifest, String> {
    let text =
        std::fs::read_to_string(dir.join(MANIFEST_FILE)).map_err(|e| format!("no readable {MANIFEST_FILE} ({e})"))?;
    toml::from_str(&text).map_err(|e| format!("{MANIFEST_FILE} is not a manifest ({e})"))
}

/// [`Ptx::check_target`] on the first 64 lines, the only ones copied.
fn check_header(ptx: &str, arch: CudaArch, debug: bool) -> Result<(), String> {
    let header_end = ptx.match_indices('\n').nth(63).map_or(ptx.len(), |(i, _)| i);
    let header = Ptx { arch, source: ptx[..header_end].to_owned() };
    header.check_target(debug).map(|_| ()).map_err(|why| format!("{PTX_FILE}: {why}"))
}

fn check_manifest(manifest: &Manifest, expected: &Expected) -> Result<(), String> {
    if manifest.source_key != expected.source_key {
        return Err(format!("it holds source key {}, not {}", short(&manifest.source_key), short(expected.source_key)));
    }
    if let Some((arch, debug)) = expected.arch.filter(|e| *e != (manifest.arch, manifest.debug)) {
        let line_info = |debug| if debug { " with line info" } else { "" };
        return Err(format!(
            "it was built for {}{}, not {arch}{}",
            manifest.arch,
            line_info(manifest.debug),
            line_info(debug)
        ));
    }
    if let Some((key, toolchain)) = expected.built_by {
        if manifest.key != key {
            return Err(format!("its manifest names key {}, not {}", short(&manifest.key), short(key)));
        }
        if manifest.toolchain != toolchain {
            return Err(format!("it was built by another toolchain ({})", first_line(&manifest.toolchain)));
        }
    }
    Ok(())
}

/// The bytes of `dir/file` if they are `len` bytes with CRC-32 `crc32`.
fn read_checked(dir: &Path, file: &str, len: u64, crc32: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(dir.join(file)).map_err(|e| format!("{file} is unreadable ({e})"))?;
    if bytes.len() as u64 != len {
        return Err(format!("{file} has {} bytes, its manifest says {len} (truncated or edited)", bytes.len()));
    }
    if key::crc32_hex(&bytes) != crc32 {
        return Err(format!("{file} does not match its manifest's CRC-32 (damaged or edited)"));
    }
    Ok(bytes)
}

/// Everything that goes into a new entry.
pub(crate) struct NewEntry<'a> {
    pub manifest: Manifest,
    pub ptx: &'a str,
    pub spec_toml: &'a str,
    pub log: &'a str,
    pub cubin: Option<&'a [u8]>,
}

/// Writes `entry` into directory `dir` (which must be new), the manifest last.
pub(crate) fn write(dir: &Path, entry: NewEntry) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(PTX_FILE), entry.ptx)?;
    std::fs::write(dir.join("spec.toml"), entry.spec_toml)?;
    std::fs::write(dir.join("build.log"), entry.log)?;
    if let (Some(record), Some(cubin)) = (entry.manifest.cubins.first(), entry.cubin) {
        std::fs::write(dir.join(&record.file), cubin)?;
    }
    std::fs::write(dir.join(MANIFEST_FILE), toml::to_string(&entry.manifest).expect("a manifest serialises"))
}

/// Every entry of a cache or AOT directory with a readable manifest, by source key.
pub fn index(dir: &Path) -> HashMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir.join("ptx")) else { return HashMap::new() };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|path| Some((read_manifest(&path).ok()?.source_key, path)))
        .collect()
}

fn short(key: &str) -> &str {
    &key[..key.len().min(12)]
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}
