//! Strict inputs and a cache that repairs itself (issue 12): architectures that do not exist and
//! empty lists are errors; boolean variables are strict; a process waiting on a held lock says
//! who holds it and keeps saying so, and with FERRINFER_JIT_WAIT_SECS gives up naming it; a
//! directory in place of a lock file is named with the fix; damaged or poisoned entries (a file
//! in place of the entry directory, a missing manifest, PTX for another processor with a
//! manifest to match, another toolchain's entry) are rebuilt, and the same in an AOT directory is
//! ignored with its reason.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrinfer_jit::norm::{NormKernel, NormModule};
use ferrinfer_jit::{Cache, CudaArch, JitConfig, JitError, JitSpec, Origin, aot};
use ferrinfer_kernels::element::DType;

fn shared_sysroot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-sysroot")
}

fn config(cache_dir: &Path) -> JitConfig {
    JitConfig { sysroot_dir: shared_sysroot_dir(), ptxas: None, ..JitConfig::new(cache_dir) }
}

fn spec() -> JitSpec {
    NormModule { kernel: NormKernel::Rms, dtype: DType::F32, weight: DType::F32, vec: 4 }.spec(CudaArch::HOPPER, false)
}

/// `ferrinfer-jit ARGS` with `vars`; returns (success, stdout + stderr).
fn cli(args: &[&str], vars: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrinfer-jit"))
        .args(args)
        .env("FERRINFER_JIT_SYSROOT_DIR", shared_sysroot_dir())
        .env_remove("FERRINFER_CUDA_ARCH_LIST")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn jit_nonexistent_and_empty_architectures_are_errors() {
    let out = tempfile::tempdir().unwrap();
    let out = out.path().to_str().unwrap();
    for (args, vars) in [
        (vec!["aot", "--arch", "7.9", "--out", out], vec![]),
        (vec!["aot", "--arch", "", "--out", out], vec![]),
        (vec!["aot", "--arch", " ; ", "--out", out], vec![]),
        (vec!["aot", "--out", out], vec![("FERRINFER_CUDA_ARCH_LIST", "9.9")]),
        (vec!["aot", "--out", out], vec![("FERRINFER_CUDA_ARCH_LIST", "")]),
        (vec!["specs", "--arch", "8.8"], vec![]),
    ] {
        let (ok, output) = cli(&args, &vars);
        assert!(!ok, "{args:?} {vars:?} succeeded:\n{output}");
        assert!(output.contains("7.0 7.2 7.5 8.0 8.6 8.7 8.9 9.0 10.0 10.1 10.3 11.0 12.0 12.1"), "{output}");
    }
    assert!(!Path::new(out).join("ptx").exists(), "nothing may be built");
}

#[test]
fn jit_every_known_architecture_is_a_processor_of_the_device_toolchain() {
    let dir = tempfile::tempdir().unwrap();
    let toolchain = ferrinfer_jit::toolchain::Toolchain::device(dir.path()).unwrap();
    let cpus = toolchain.rustc_command().args(["--print", "target-cpus", "--target", "nvptx64-nvidia-cuda"]).output();
    let cpus = String::from_utf8_lossy(&cpus.unwrap().stdout).into_owned();
    for arch in CudaArch::known() {
        let listed = cpus.lines().any(|l| l.split_whitespace().next() == Some(arch.target_cpu().as_str()));
        assert!(listed, "{} is not a target CPU of {}:\n{cpus}", arch.target_cpu(), toolchain.name);
    }
}

#[test]
fn jit_boolean_variables_reject_unknown_values_loudly() {
    for var in ["FERRINFER_DISABLE_JIT", "FERRINFER_JIT_VERBOSE", "FERRINFER_JIT_DEBUG", "FERRINFER_REQUIRE_PTXAS"] {
        let (ok, output) = cli(&["specs", "--family", "norm"], &[(var, "ture")]);
        assert!(!ok && output.contains(var) && output.contains("\"ture\""), "{var}=ture: {output}");
    }
    let (ok, output) = cli(&["specs", "--family", "norm"], &[("FERRINFER_JIT_DEBUG", "Yes")]);
    assert!(ok && output.contains("debug = true"), "FERRINFER_JIT_DEBUG=Yes is on: {output}");
}

#[test]
fn jit_disable_jit_accepts_the_usual_spellings() {
    let dir = tempfile::tempdir().unwrap();
    for value in ["true", "yes", "ON", "1"] {
        let (ok, output) = cli(
            &["bench-first-hit", "--dir", dir.path().to_str().unwrap()],
            &[("FERRINFER_DISABLE_JIT", value), ("FERRINFER_AOT_DIR", "")],
        );
        assert!(!ok && output.contains("FERRINFER_DISABLE_JIT forbids building it"), "{value}: {output}");
    }
}

/// Child side of the lock tests: asks for the module (the parent holds its lock).
#[test]
fn jit_lock_child() {
    if std::env::var_os("FERRINFER_TEST_LOCK_CHILD").is_none() {
        return;
    }
    let module = Cache::new(JitConfig::from_env().unwrap(), &[]).module(&spec()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(module.origin, Origin::Built);
}

/// The lock of `spec()` in a cache at `dir`, held by this process.
fn hold_the_lock(dir: &Path) -> ferrinfer_jit::lock::Held {
    let key = Cache::new(config(dir), &[]).keys(&spec()).unwrap().1;
    std::fs::create_dir_all(dir.join("locks")).unwrap();
    ferrinfer_jit::lock::acquire(&dir.join("locks").join(format!("{key}.lock")), "the test", None).unwrap()
}

/// [`jit_lock_child`] over the cache at `dir`, with `vars`.
fn lock_child(dir: &Path, vars: &[(&str, &str)]) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "jit_lock_child", "--nocapture", "--test-threads=1"])
        .env("FERRINFER_TEST_LOCK_CHILD", "1")
        .env("FERRINFER_CACHE_DIR", dir)
        .env("FERRINFER_JIT_SYSROOT_DIR", shared_sysroot_dir())
        .env_remove("FERRINFER_PTXAS")
        .env_remove("FERRINFER_REQUIRE_PTXAS")
        .env_remove("FERRINFER_JIT_VERBOSE")
        .env_remove("FERRINFER_JIT_WAIT_SECS")
        .envs(vars.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn jit_a_held_lock_names_its_holder_and_the_waiter_keeps_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let held = hold_the_lock(dir.path());
    let mut child = lock_child(dir.path(), &[]);
    // Two notices (after 3 s, then 5 s later), each naming this process; then let go.
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let holder = format!("locked by pid {} (", std::process::id());
    let mut notices = Vec::new();
    while notices.len() < 2 {
        let line = stderr.next().expect("the child stopped talking while waiting").unwrap();
        if line.contains("still waiting") {
            assert!(line.contains(&holder) && line.contains("jit_inputs"), "the notice names the holder: {line}");
            notices.push(line);
        }
    }
    drop(held);
    let rest: Vec<String> = stderr.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success(), "the child failed after the lock was released:\n{}", rest.join("\n"));
    assert!(rest.iter().any(|l| l.contains("got the lock")), "{rest:?}");
}

#[test]
fn jit_a_waiter_with_a_limit_gives_up_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let _held = hold_the_lock(dir.path());
    let started = Instant::now();
    let out = lock_child(dir.path(), &[("FERRINFER_JIT_WAIT_SECS", "1")]).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child built while the lock was held:\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(60), "the child waited {:?}", started.elapsed());
    for needle in [
        "gave up waiting for kernel module `norm_rmsnorm_f32",
        "after 1 s (FERRINFER_JIT_WAIT_SECS)",
        &format!("is locked by pid {} (", std::process::id()),
        "raise FERRINFER_JIT_WAIT_SECS",
    ] {
        assert!(stderr.contains(needle), "{stderr:?} lacks {needle:?}");
    }
}

#[test]
fn jit_a_directory_in_place_of_a_lock_file_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let key = Cache::new(config(dir.path()), &[]).keys(&spec()).unwrap().1;
    let lock = dir.path().join("locks").join(format!("{key}.lock"));
    std::fs::create_dir_all(&lock).unwrap();
    let err = origin_in_fresh_cache(dir.path()).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, JitError::Lock(_)), "{message}");
    assert!(message.contains(&format!("{} is a directory, where the lock file for kernel module", lock.display())));
    assert!(message.contains(&format!("remove it (`rm -r {}`)", lock.display())), "{message}");
    assert!(!message.contains("not writable"), "{message}");
}

/// A built entry of `spec()` in a fresh cache, and that cache's entry directory.
fn built(dir: &Path) -> PathBuf {
    let cache = Cache::new(config(dir), &[]);
    assert_eq!(cache.module(&spec()).unwrap().origin, Origin::Built);
    cache.entry_dir(&cache.keys(&spec()).unwrap().1)
}

/// A named way to damage a cache.
type Damage<'a> = (&'static str, Box<dyn Fn() + 'a>);

fn origin_in_fresh_cache(dir: &Path) -> Result<Origin, JitError> {
    Cache::new(config(dir), &[]).module(&spec()).map(|m| m.origin)
}

/// Rewrites the entry's PTX with `edit` and its manifest to match (size and CRC-32), as a
/// poisoned build would have written it.
fn poison(entry: &Path, edit: impl Fn(&str) -> String, manifest_edit: impl Fn(&mut toml::Table)) {
    let ptx = edit(&std::fs::read_to_string(entry.join("kernels.ptx")).unwrap());
    std::fs::write(entry.join("kernels.ptx"), &ptx).unwrap();
    let mut manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(entry.join("manifest.toml")).unwrap()).unwrap();
    manifest.insert("ptx_bytes".into(), (ptx.len() as i64).into());
    manifest.insert("ptx_crc32".into(), ferrinfer_jit::key::crc32_hex(ptx.as_bytes()).into());
    manifest_edit(&mut manifest);
    std::fs::write(entry.join("manifest.toml"), toml::to_string(&manifest).unwrap()).unwrap();
}

#[test]
fn jit_damaged_entry_paths_are_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let entry = built(dir.path());
    let cases: [Damage; 5] = [
        (
            "entry directory replaced by a file",
            Box::new(|| {
                std::fs::remove_dir_all(&entry).unwrap();
                std::fs::write(&entry, "oops").unwrap();
            }),
        ),
        ("manifest missing", Box::new(|| std::fs::remove_file(entry.join("manifest.toml")).unwrap())),
        (
            "ptx/ replaced by a file",
            Box::new(|| {
                std::fs::remove_dir_all(dir.path().join("ptx")).unwrap();
                std::fs::write(dir.path().join("ptx"), "").unwrap();
            }),
        ),
        (
            "locks/ replaced by a file",
            Box::new(|| {
                std::fs::remove_dir_all(&entry).unwrap();
                std::fs::remove_dir_all(dir.path().join("locks")).unwrap();
                std::fs::write(dir.path().join("locks"), "").unwrap();
            }),
        ),
        (
            "build/ replaced by a file",
            Box::new(|| {
                std::fs::remove_dir_all(&entry).unwrap();
                let _ = std::fs::remove_dir_all(dir.path().join("build"));
                std::fs::write(dir.path().join("build"), "").unwrap();
            }),
        ),
    ];
    for (what, damage) in cases {
        damage();
        assert_eq!(origin_in_fresh_cache(dir.path()).unwrap(), Origin::Built, "{what}");
        assert_eq!(origin_in_fresh_cache(dir.path()).unwrap(), Origin::Disk, "{what}: the repair is stored");
    }
}

#[test]
fn jit_poisoned_disk_entries_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let entry = built(dir.path());
    let cases: [Damage; 4] = [
        (
            "PTX for another processor",
            Box::new(|| poison(&entry, |p| p.replace(".target sm_90", ".target znver3"), |_| ())),
        ),
        ("sm_70 PTX", Box::new(|| poison(&entry, |p| p.replace(".target sm_90", ".target sm_70"), |_| ()))),
        (
            "a PTX ISA too old for sm_90",
            Box::new(|| poison(&entry, |p| p.replace(".version 8.0", ".version 6.0"), |_| ())),
        ),
        (
            "another toolchain's entry",
            Box::new(|| {
                poison(&entry, str::to_owned, |m| {
                    m.insert("toolchain".into(), "rustc 1.0.0-nightly (0000000 2015-01-01)".into());
                })
            }),
        ),
    ];
    for (what, damage) in cases {
        damage();
        assert_eq!(origin_in_fresh_cache(dir.path()).unwrap(), Origin::Built, "{what} was loaded");
        let ptx = std::fs::read_to_string(entry.join("kernels.ptx")).unwrap();
        assert!(ptx.contains("\n.target sm_90\n") && ptx.contains("\n.version 8.0\n"), "{what}");
    }
}

#[test]
fn jit_poisoned_aot_entries_are_ignored_with_the_reason() {
    let (aot_dir, cache_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    aot::build(aot_dir.path(), &[CudaArch::HOPPER], Some("norm"), &config(cache_dir.path())).unwrap();
    // `bench-first-hit` looks up the bf16 rmsnorm module.
    let bf16 = NormModule { kernel: NormKernel::Rms, dtype: DType::Bf16, weight: DType::Bf16, vec: 8 }
        .spec(CudaArch::HOPPER, false);
    let source_key = Cache::new(config(cache_dir.path()), &[]).keys(&bf16).unwrap().0;
    let entry = aot_dir
        .path()
        .join("ptx")
        .read_dir()
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|path| std::fs::read_to_string(path.join("manifest.toml")).unwrap().contains(&source_key));
    poison(&entry.unwrap(), |p| p.replace(".target sm_90", ".target znver3"), |_| ());
    let (ok, output) = cli(
        &["bench-first-hit", "--dir", cache_dir.path().to_str().unwrap()],
        &[("FERRINFER_DISABLE_JIT", "1"), ("FERRINFER_AOT_DIR", aot_dir.path().to_str().unwrap())],
    );
    assert!(!ok, "a poisoned AOT entry was used:\n{output}");
    assert!(output.contains("ignoring AOT entry") && output.contains("targets `znver3`, not `sm_90`"), "{output}");
    let mut from_aot = config(cache_dir.path());
    from_aot.aot_dir = Some(aot_dir.path().to_owned());
    assert_eq!(Cache::new(from_aot, &[]).module(&bf16).unwrap().origin, Origin::Built);
}
