//! PTX validation and assembly with `ptxas` (from the PyPI wheel `nvidia-cuda-nvcc-cu12` where
//! there is no CUDA install): registers, stack and spills per entry point, and the cubin — the
//! machine code the driver would otherwise compile from the PTX on a module's first load, which
//! takes seconds. A kernel that spills or keeps a stack frame is rejected, like one with
//! `.local` memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::builder::{BuildError, Ptx};
use crate::child;

/// What ptxas reports for one entry point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryResources {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub shared_bytes: u32,
}

/// A module assembled for its arch.
#[derive(Clone, Debug)]
pub struct Assembly {
    pub resources: Vec<EntryResources>,
    pub cubin: Vec<u8>,
    /// `ptxas --version`'s release (`V12.9.86`).
    pub ptxas_version: String,
}

/// Assembles `ptx` with `ptxas -v` (in `scratch`): each entry's resources and the cubin.
pub fn assemble(ptxas: &Path, ptx: &Ptx, spec_name: &str, scratch: &Path) -> Result<Assembly, BuildError> {
    std::fs::create_dir_all(scratch).map_err(BuildError::io(scratch))?;
    let (input, cubin) = (scratch.join("check.ptx"), scratch.join("check.cubin"));
    std::fs::write(&input, &ptx.source).map_err(BuildError::io(&input))?;
    // An empty environment, as for rustc: nothing the caller sets can change the cubin.
    let mut command = child::command(ptxas);
    command.env_clear().arg(format!("-arch={}", ptx.arch.target_cpu())).arg("-v");
    if splits_compile(ptxas) {
        // Entry points optimised on every core: the same cubin, byte for byte (checked with
        // ptxas 12.9 on the norm modules), in ~0.36 s instead of ~0.46 on 2 cores.
        command.args(["--split-compile", "0"]);
    }
    let output = command.arg(&input).arg("-o").arg(&cubin).output().map_err(BuildError::io(ptxas))?;
    let log = String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
    let ptxas_version = version(ptxas);
    if !output.status.success() {
        if log.contains("is not defined for option 'gpu-name'") || log.contains("Unsupported .version") {
            return Err(BuildError::PtxasTooOld { ptxas: ptxas_version, arch: ptx.arch.target_cpu() });
        }
        return Err(BuildError::PtxasFailed { spec: spec_name.to_owned(), log });
    }
    let cubin = std::fs::read(&cubin).map_err(BuildError::io(&cubin))?;
    Ok(Assembly { resources: parse(&log), cubin, ptxas_version })
}

/// `ptxas --version`'s release (`V12.9.86`), asked once per ptxas per process.
pub fn version(ptxas: &Path) -> String {
    static VERSIONS: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    once_per_ptxas(&VERSIONS, ptxas, || release(&stdout_of(ptxas, "--version")))
}

/// Whether this ptxas has `--split-compile` (CUDA 12 releases do; older ones would fail on it).
fn splits_compile(ptxas: &Path) -> bool {
    static SPLITS: OnceLock<Mutex<HashMap<PathBuf, bool>>> = OnceLock::new();
    once_per_ptxas(&SPLITS, ptxas, || stdout_of(ptxas, "--help").contains("--split-compile"))
}

/// `ask()`, once per ptxas path per process.
fn once_per_ptxas<T: Clone>(
    answers: &OnceLock<Mutex<HashMap<PathBuf, T>>>,
    ptxas: &Path,
    ask: impl FnOnce() -> T,
) -> T {
    let mut answers = answers.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    answers.entry(ptxas.to_owned()).or_insert_with(ask).clone()
}

/// What `ptxas FLAG` prints (empty if it cannot run).
fn stdout_of(ptxas: &Path, flag: &str) -> String {
    let out = child::command(ptxas).env_clear().arg(flag).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
}

/// `V12.9.86` from "Cuda compilation tools, release 12.9, V12.9.86".
fn release(version_output: &str) -> String {
    let words = version_output.split([' ', ',', '\n']);
    let mut releases = words.filter(|w| w.starts_with('V') && w[1..].starts_with(|c: char| c.is_ascii_digit()));
    releases.next().unwrap_or("unknown").to_owned()
}

/// Rejects any entry with spills or a stack frame.
pub fn check(resources: &[EntryResources]) -> Result<(), BuildError> {
    for r in resources {
        let what = match (r.spill_store_bytes + r.spill_load_bytes, r.stack_bytes) {
            (0, 0) => continue,
            (0, stack) => format!("a {stack}-byte stack frame"),
            (spills, _) => format!("{spills} bytes of register spills"),
        };
        return Err(BuildError::Resources { entry: r.name.clone(), what, report: format!("{r:?}") });
    }
    Ok(())
}

/// Parses `ptxas -v` output: entry functions only (helper functions are inlined into them).
fn parse(log: &str) -> Vec<EntryResources> {
    let mut entries: Vec<EntryResources> = Vec::new();
    let mut in_entry = false;
    for line in log.lines() {
        if let Some(name) = quoted_after(line, "Compiling entry function '") {
            entries.push(EntryResources {
                name,
                registers: 0,
                stack_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
                shared_bytes: 0,
            });
            in_entry = true;
        } else if line.contains("Function properties for ") {
            in_entry = entries.last().is_some_and(|e| line.trim_end().ends_with(&e.name));
        } else if let (true, Some(entry)) = (in_entry, entries.last_mut()) {
            entry.stack_bytes += number_before(line, "bytes stack frame").unwrap_or(0);
            entry.spill_store_bytes += number_before(line, "bytes spill stores").unwrap_or(0);
            entry.spill_load_bytes += number_before(line, "bytes spill loads").unwrap_or(0);
            entry.registers = number_before(line, "registers").unwrap_or(entry.registers);
            entry.shared_bytes = number_before(line, "bytes smem").unwrap_or(entry.shared_bytes);
        }
    }
    entries
}

fn quoted_after(line: &str, prefix: &str) -> Option<String> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    Some(rest[..rest.find('\'')?].to_owned())
}

/// The integer right before `unit` in `line` ("36 registers" → 36).
fn number_before(line: &str, unit: &str) -> Option<u32> {
    let before = &line[..line.find(unit)?];
    before.split([' ', ',', ':']).rev().find(|w| !w.is_empty())?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 532 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90'
ptxas info    : Function properties for k_a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 36 registers, used 1 barriers, 128 bytes smem
ptxas info    : Function properties for _helper
    16 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads
ptxas info    : Compiling entry function 'k_b' for 'sm_90'
ptxas info    : Function properties for k_b
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers
";

    #[test]
    fn parses_entries_and_ignores_helper_functions() {
        let entries = parse(LOG);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0],
            EntryResources {
                name: "k_a".into(),
                registers: 36,
                stack_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
                shared_bytes: 128
            }
        );
        assert_eq!((entries[1].registers, entries[1].spill_store_bytes, entries[1].stack_bytes), (255, 4, 8));
    }

    #[test]
    fn the_release_is_read_from_the_version_banner() {
        let banner = "ptxas: NVIDIA (R) Ptx optimizing assembler\nCuda compilation tools, release 12.9, V12.9.86\nBuild cuda_12.9.r12.9/compiler.36037853_0\n";
        assert_eq!(release(banner), "V12.9.86");
        assert_eq!(release(""), "unknown");
    }

    #[test]
    fn spills_are_rejected_naming_the_kernel() {
        let err = check(&parse(LOG)).unwrap_err();
        assert!(matches!(&err, BuildError::Resources { entry, .. } if entry == "k_b"), "{err}");
    }
}
