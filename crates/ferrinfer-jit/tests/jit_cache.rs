//! The disk cache with real builds (needs the nightly with rust-src, as CI has): cold build then
//! hits, damaged entries rebuilt, AOT and embedded lookups, FERRINFER_DISABLE_JIT misses (a
//! damaged entry's with the reason it was rejected), an unwritable cache and a read-only `ptx/`
//! (found before building), 8 processes × 4 threads racing on one spec, and `kill -9` of the
//! builder alone mid-build (its rustc dies with it; what it left is swept).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrinfer_jit::norm::{NormKernel, NormModule};
use ferrinfer_jit::{Cache, CudaArch, EmbeddedModule, JitConfig, JitError, JitSpec, Origin, aot, embed};
use ferrinfer_kernels::element::DType;

/// Builds of all tests share one sysroot directory, so `core` is compiled once per arch.
fn shared_sysroot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jit-sysroot")
}

fn config(cache_dir: &Path) -> JitConfig {
    JitConfig { sysroot_dir: shared_sysroot_dir(), ptxas: None, ..JitConfig::new(cache_dir) }
}

fn spec(dtype: DType) -> JitSpec {
    NormModule { kernel: NormKernel::Rms, dtype, weight: dtype, vec: 16 / dtype.size() as u32 }
        .spec(CudaArch::HOPPER, false)
}

fn entry_of(cache: &Cache, spec: &JitSpec) -> PathBuf {
    cache.entry_dir(&cache.keys(spec).unwrap().1)
}

#[test]
fn jit_cold_build_then_disk_then_in_process_hit() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(DType::Bf16);
    let first = Cache::new(config(dir.path()), &[]);
    let built = first.module(&spec).unwrap();
    assert_eq!(built.origin, Origin::Built);
    assert!(built.ptx.contains(".visible .entry ferrinfer_rmsnorm_bf16_v8"));
    assert!(std::sync::Arc::ptr_eq(&built, &first.module(&spec).unwrap()), "in-process hit");
    let entry = entry_of(&first, &spec);
    for file in ["kernels.ptx", "spec.toml", "manifest.toml", "build.log"] {
        assert!(entry.join(file).is_file(), "{file} missing from {}", entry.display());
    }
    let again = Cache::new(config(dir.path()), &[]).module(&spec).unwrap();
    assert_eq!((again.origin, &again.ptx), (Origin::Disk, &built.ptx));
}

#[test]
fn jit_truncated_ptx_is_detected_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(DType::F16);
    let cache = Cache::new(config(dir.path()), &[]);
    let good = cache.module(&spec).unwrap();
    let ptx_file = entry_of(&cache, &spec).join("kernels.ptx");
    std::fs::write(&ptx_file, &good.ptx[..good.ptx.len() / 2]).unwrap();
    let rebuilt = Cache::new(config(dir.path()), &[]).module(&spec).unwrap();
    assert_eq!(rebuilt.origin, Origin::Built, "a damaged entry must be rebuilt, never loaded");
    assert_eq!(rebuilt.ptx, good.ptx);
    assert_eq!(std::fs::read_to_string(ptx_file).unwrap(), *good.ptx);
}

#[test]
fn jit_aot_directory_and_embedded_modules_are_found_first() {
    let (aot_dir, cache_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let built = aot::build(aot_dir.path(), &[CudaArch::HOPPER], Some("norm"), &config(cache_dir.path())).unwrap();
    let declared = ferrinfer_jit::norm::declared_specs(CudaArch::HOPPER, false).len();
    assert_eq!(built.len(), declared, "every module the norm family declares");
    // With JIT disabled and an empty cache, only the AOT directory can answer.
    let mut from_aot = config(cache_dir.path());
    from_aot.aot_dir = Some(aot_dir.path().to_owned());
    from_aot.disable_jit = true;
    let module = Cache::new(from_aot.clone(), &[]).module(&spec(DType::F32)).unwrap();
    assert_eq!(module.origin, Origin::Aot);
    // An embedded module wins over everything: embed the bf16 rmsnorm module only, as a build
    // script does (compressed, with its cubin when ptxas made one).
    let wanted = Cache::new(from_aot.clone(), &[]).keys(&spec(DType::Bf16)).unwrap().0;
    let entry = aot::embeddable(aot_dir.path()).into_iter().find(|e| e.source_key == wanted).unwrap();
    let leak = |bytes: Vec<u8>| -> &'static [u8] { Box::leak(bytes.into_boxed_slice()) };
    let embedded: &'static [EmbeddedModule] = Box::leak(Box::new([EmbeddedModule {
        source_key: Box::leak(entry.source_key.into_boxed_str()),
        arch: entry.arch,
        ptx: leak(embed::compress(entry.ptx.as_bytes())),
        cubin: entry.cubin.as_deref().map(|c| leak(embed::compress(c))),
    }]));
    let modules: Vec<_> =
        DType::ALL.into_iter().map(|d| Cache::new(from_aot.clone(), embedded).module(&spec(d)).unwrap()).collect();
    let origins: Vec<Origin> = modules.iter().map(|m| m.origin).collect();
    assert_eq!(origins, [Origin::Aot, Origin::Embedded, Origin::Aot], "f16, bf16, f32");
    assert_eq!(*modules[1].ptx, entry.ptx, "the embedded PTX, inflated");
    let cubin = modules[1].cubin(CudaArch::HOPPER).map(|c| c.to_vec());
    assert_eq!(cubin, entry.cubin, "the embedded cubin (where ptxas made one), inflated");
}

#[test]
fn jit_disabled_miss_names_the_spec_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let config = JitConfig { disable_jit: true, ..config(dir.path()) };
    let err = Cache::new(config, &[]).module(&spec(DType::Bf16)).unwrap_err();
    assert!(matches!(err, JitError::JitDisabled { .. }), "{err}");
    let message = err.to_string();
    for needle in ["norm_rmsnorm_bf16", "FERRINFER_DISABLE_JIT", "cargo xtask aot --arch 9.0 --family norm"] {
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
    assert!(!dir.path().join("ptx").exists(), "nothing may be built");
}

#[test]
fn jit_disabled_with_a_damaged_entry_says_why_it_was_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(DType::F32);
    let cache = Cache::new(config(dir.path()), &[]);
    let good = cache.module(&spec).unwrap();
    let entry = entry_of(&cache, &spec);
    std::fs::write(entry.join("kernels.ptx"), &good.ptx[..good.ptx.len() / 2]).unwrap();
    let disabled = JitConfig { disable_jit: true, ..config(dir.path()) };
    let err = Cache::new(disabled, &[]).module(&spec).unwrap_err();
    assert!(matches!(&err, JitError::JitDisabled { rejected: Some(_), .. }), "{err}");
    let message = err.to_string();
    for needle in [
        &format!("Its cache entry {} was rejected: kernels.ptx has", entry.display()),
        "(truncated or edited)",
        "a run without FERRINFER_DISABLE_JIT rebuilds it",
        "cargo xtask aot --arch 9.0 --family norm",
    ] {
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

#[test]
fn jit_unwritable_cache_gives_a_clear_error() {
    // A cache directory below a regular file cannot be created, even by root.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    let err = Cache::new(config(&file.join("cache")), &[]).module(&spec(DType::F32)).unwrap_err();
    assert!(matches!(err, JitError::CacheNotWritable { .. }), "{err}");
    assert!(err.to_string().contains("FERRINFER_CACHE_DIR"), "{err}");
}

#[test]
fn jit_a_read_only_ptx_directory_fails_before_building_naming_the_variable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ptx = dir.path().join("ptx");
    std::fs::create_dir(&ptx).unwrap();
    std::fs::set_permissions(&ptx, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ptx.join("probe"), "").is_ok() {
        eprintln!("SKIPPED: this user writes into read-only directories (root with CAP_DAC_OVERRIDE)");
        return;
    }
    // A sysroot directory of its own, where a build would start by compiling `core`.
    let sysroot = dir.path().join("own-sysroot");
    let config = JitConfig { sysroot_dir: sysroot.clone(), ..config(dir.path()) };
    let err = Cache::new(config, &[]).module(&spec(DType::F32)).unwrap_err();
    std::fs::set_permissions(&ptx, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(matches!(&err, JitError::CacheNotWritable { dir, .. } if *dir == ptx), "{err}");
    assert!(err.to_string().contains("set FERRINFER_CACHE_DIR to a writable directory"), "{err}");
    let built: Vec<_> = sysroot.read_dir().into_iter().flatten().flatten().map(|e| e.file_name()).collect();
    assert!(built.iter().all(|name| name == "toolchains"), "a build started before the check: {built:?}");
}

/// Child side of the race below (a no-op unless that test started this process): 4 threads ask
/// for one spec from a cache configured by the environment.
#[test]
fn jit_race_child() {
    if std::env::var_os("FERRINFER_TEST_RACE_CHILD").is_none() {
        return;
    }
    let cache = Cache::new(JitConfig::from_env().unwrap(), &[]);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| cache.module(&spec(DType::Bf16)).unwrap());
        }
    });
}

fn child(cache_dir: &Path, sysroot_dir: &Path, test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("FERRINFER_TEST_RACE_CHILD", "1")
        .env("FERRINFER_CACHE_DIR", cache_dir)
        .env("FERRINFER_JIT_SYSROOT_DIR", sysroot_dir)
        .env("FERRINFER_JIT_VERBOSE", "1")
        .env_remove("FERRINFER_AOT_DIR")
        .env_remove("FERRINFER_DISABLE_JIT");
    cmd
}

#[test]
fn jit_eight_processes_racing_build_once() {
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..8)
        .map(|_| {
            child(dir.path(), &shared_sysroot_dir(), "jit_race_child")
                .stderr(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let logs: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "a child failed:\n{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stderr).into_owned()
        })
        .collect();
    let all = logs.concat();
    let name = spec(DType::Bf16).name;
    let builds = all.lines().filter(|l| l.starts_with(&format!("ferrinfer-jit: built {name} "))).count();
    let hits = all.lines().filter(|l| l.starts_with(&format!("ferrinfer-jit: {name}: Disk"))).count();
    assert_eq!((builds, hits), (1, 7), "expected one build and 7 disk hits:\n{all}");
}

/// Name, state and parent of process `pid`, from `/proc/<pid>/stat` (`pid (comm) state ppid ...`).
fn process(pid: u32) -> Option<(String, char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    Some((head.split_once(" (")?.1.to_owned(), state, fields.next()?.parse().ok()?))
}

/// Whether process `pid` runs (a zombie, dead and waiting to be reaped, does not).
fn is_running(pid: u32) -> bool {
    process(pid).is_some_and(|(_, state, _)| state != 'Z')
}

/// The running children of process `parent` called `name`.
fn running_children(parent: u32, name: &str) -> Vec<u32> {
    let pids = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok());
    pids.filter(|&pid| process(pid).is_some_and(|(comm, state, ppid)| comm == name && ppid == parent && state != 'Z'))
        .collect()
}

#[test]
fn jit_kill_9_of_the_builder_alone_kills_its_rustc_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A sysroot directory of its own: the child must build `core` first, which takes seconds.
    let slow_sysroot = dir.path().join("cold-sysroot");
    let mut victim =
        child(dir.path(), &slow_sysroot, "jit_race_child").stderr(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
    // Wait until the child's rustc is compiling `core` (its temporary sysroot exists).
    let core_started = || {
        slow_sysroot.read_dir().is_ok_and(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".tmp-")))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let rustc = loop {
        match running_children(victim.id(), "rustc").first() {
            Some(&rustc) if core_started() => break rustc,
            _ => assert!(Instant::now() < deadline, "the child never started building"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500)); // well into `core`
    // SIGKILL the child alone, not its process group: its rustc must die with it, or it would
    // go on writing its temporary sysroot after the next build swept it.
    victim.kill().unwrap();
    victim.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_running(rustc) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if is_running(rustc) {
        let _ = Command::new("kill").args(["-s", "KILL", &rustc.to_string()]).status();
        panic!("rustc {rustc} outlived the builder killed with kill -9");
    }
    for lock in std::fs::read_dir(&slow_sysroot)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "lock"))
    {
        File::open(lock.path()).unwrap().try_lock().expect("the dead process's sysroot lock must be gone");
    }
    let complete = std::fs::read_dir(&slow_sysroot).unwrap().flatten().any(|e| e.path().join("complete").exists());
    assert!(!complete, "a half-built sysroot was left in place");

    // The next build, over the same sysroot directory, sweeps what the killed one left.
    let cache = Cache::new(JitConfig { sysroot_dir: slow_sysroot.clone(), ..config(dir.path()) }, &[]);
    let spec = spec(DType::Bf16);
    let key = cache.keys(&spec).unwrap().1;
    let lock = File::open(dir.path().join("locks").join(format!("{key}.lock"))).unwrap();
    lock.try_lock().expect("the dead process's lock must be gone");
    drop(lock);
    assert!(!cache.entry_dir(&key).exists(), "a half-built entry was left in place");
    let module = cache.module(&spec).unwrap();
    assert_eq!(module.origin, Origin::Built);
    assert!(aot::embeddable(dir.path()).iter().any(|e| e.source_key == module.source_key), "a valid entry");
    for folder in [dir.path().join("ptx"), dir.path().join("build"), slow_sysroot] {
        let left: Vec<_> = folder.read_dir().unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(!left.iter().any(|n| n.to_string_lossy().starts_with(".tmp-")), "{}: {left:?}", folder.display());
    }
}

#[test]
fn jit_a_binary_with_embedded_modules_targets_their_archs_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let arch = |major, minor| CudaArch { major, minor };
    let module = |arch| EmbeddedModule { source_key: "k", arch, ptx: b"", cubin: None };
    let embedded: &'static [EmbeddedModule] =
        Box::leak(Box::new([module(arch(8, 0)), module(CudaArch::HOPPER), module(arch(8, 0))]));
    let cache = Cache::new(config(dir.path()), embedded);
    // 8.6 runs the 8.0 PTX; 9.0 its own; 10.0 the 9.0 PTX; 7.5 none of them.
    assert_eq!(cache.target_arch(arch(8, 6)).unwrap(), arch(8, 0));
    assert_eq!(cache.target_arch(arch(9, 0)).unwrap(), CudaArch::HOPPER);
    assert_eq!(cache.target_arch(arch(10, 0)).unwrap(), CudaArch::HOPPER);
    let err = cache.target_arch(arch(7, 5)).unwrap_err().to_string();
    assert!(err.contains("FERRINFER_CUDA_ARCH_LIST") && err.contains("7.5"), "{err}");
    // Without embedded modules, or with a list, the device's own / the list decides.
    assert_eq!(Cache::new(config(dir.path()), &[]).target_arch(arch(8, 6)).unwrap(), arch(8, 6));
    let listed = JitConfig { arch_list: Some(vec![arch(8, 6)]), ..config(dir.path()) };
    assert_eq!(Cache::new(listed, embedded).target_arch(arch(8, 6)).unwrap(), arch(8, 6));
}
