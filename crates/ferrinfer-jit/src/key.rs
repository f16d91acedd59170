//! Cache keys: SHA-256 over everything that determines a module's PTX, nothing else.
//!
//! `source_key` covers what is compiled and how: the spec (canonical TOML: arch, debug, flags,
//! entry points), the generated crate, the kernel sources the spec depends on (core files + the
//! spec's own, a directory's every file), the edition and every fixed rustc flag of the three
//! crates of a build (`core`, kernels, entry points). The builder runs rustc with nothing else —
//! no configuration file, no environment variable — so these are all the inputs. `key` adds the
//! exact device toolchain (`rustc -vV`). An AOT entry is found by its `source_key` (the machine
//! running it may have no Rust at all); the JIT disk cache by `key`.

use sha2::{Digest, Sha256};

use crate::JitSpec;
use crate::builder::{HOPPER_PTX_ISA, KERNEL_FLAGS, KERNELS_EDITION, MIN_PTX_ISA};
use crate::codegen::GeneratedCrate;
use crate::digest::hex;
use crate::rustc::CODEGEN_FLAGS;
use crate::sources::{CORE_SOURCES, KernelSources};

/// Version of the key derivation itself: bump when what is hashed changes.
const KEY_VERSION: &str = "ferrinfer-jit key v2";

/// Hex SHA-256 of what `spec` compiles.
pub fn source_key(spec: &JitSpec, generated: &GeneratedCrate, sources: &KernelSources) -> String {
    let mut hash = Sha256::new();
    let mut field = |name: &str, value: &str| {
        hash.update(format!("{name} {}\n", value.len()));
        hash.update(value);
    };
    field("version", KEY_VERSION);
    field("spec", &spec.to_toml());
    field("lib.rs", &generated.lib_rs);
    field("edition", KERNELS_EDITION);
    for path in relevant_sources(spec, sources) {
        field(&format!("kernels/src/{path}"), sources.get(&path).unwrap_or("<missing>"));
    }
    field("flags", &[CODEGEN_FLAGS, KERNEL_FLAGS].concat().join(" "));
    field("min ptx isa", &MIN_PTX_ISA.to_string());
    field("hopper ptx isa", &HOPPER_PTX_ISA.to_string());
    field("sysroot", &crate::sysroot::recipe());
    hex(&hash.finalize())
}

/// Hex SHA-256 of a source key built by a given toolchain.
pub fn key(source_key: &str, toolchain: &str) -> String {
    hex(&Sha256::new().chain_update(source_key).chain_update("\n").chain_update(toolchain).finalize())
}

/// Hex CRC-32 of bytes: the integrity check of an entry's files, run on every disk hit. It
/// guards against truncation and damage, not forgery (whoever can write the file can write its
/// manifest); SHA-256 over a megabyte of PTX took 0.45 ms of a 1 ms budget, CRC-32 takes 0.05.
pub fn crc32_hex(bytes: &[u8]) -> String {
    format!("{:08x}", crc32fast::hash(bytes))
}

/// Core files then the spec's own (a directory entry: every file under it), sorted and without
/// duplicates.
fn relevant_sources(spec: &JitSpec, sources: &KernelSources) -> Vec<String> {
    let entries = CORE_SOURCES.iter().copied().chain(spec.sources.iter().map(String::as_str));
    let mut paths: Vec<String> = entries.flat_map(|entry| sources.named_by(entry)).collect();
    paths.sort();
    paths.dedup();
    paths
}
