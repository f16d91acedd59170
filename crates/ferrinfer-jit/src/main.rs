//! `ferrinfer-jit`: the JIT's command line — build modules ahead of time (`aot`, what
//! `cargo xtask aot` runs), print specs, and time the cache (`bench-cache`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use ferrinfer_jit::toolchain::Toolchain;
use ferrinfer_jit::{Cache, CudaArch, FAMILIES, JitConfig, JitError, aot, sysroot};

#[derive(Parser)]
#[command(name = "ferrinfer-jit", about = "Build and inspect ferrinfer's kernel modules", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build every module of a family (default: all) into an AOT directory: the PTX, and with
    /// ptxas (FERRINFER_PTXAS or on PATH) each module's cubin.
    Aot {
        /// Target architectures, e.g. "9.0" or "8.0 9.0" (default: FERRINFER_CUDA_ARCH_LIST, else 8.0 8.9 9.0).
        #[arg(long)]
        arch: Option<String>,
        #[arg(long)]
        family: Option<String>,
        /// Output directory (it gets the cache's layout).
        #[arg(long, default_value = "ferrinfer-aot")]
        out: PathBuf,
    },
    /// Print the specs a family declares, as TOML.
    Specs {
        #[arg(long)]
        family: Option<String>,
        #[arg(long, default_value = "9.0")]
        arch: String,
    },
    /// Time `core`, the first module of an arch (its kernels crate too), a cold build of the
    /// same module, a disk-cache hit (in this process and in a fresh one) and an in-process hit
    /// of one norm module, all in a sysroot of its own.
    BenchCache {
        /// Cache directory to use; it is emptied first (default: a fresh temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Time one disk-cache lookup in this fresh process (bench-cache runs it).
    #[command(hide = true)]
    BenchFirstHit {
        #[arg(long)]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<(), JitError> {
    let config = JitConfig::from_env()?;
    match command {
        Command::Aot { arch, family, out } => {
            let archs = match arch {
                Some(list) => parse_archs(&list)?,
                None => config.arch_list.clone().unwrap_or(CudaArch::AOT_DEFAULT.to_vec()),
            };
            aot_build(&config, &archs, family.as_deref(), &out)
        }
        Command::Specs { family, arch } => {
            for arch in parse_archs(&arch)? {
                for f in FAMILIES.iter().filter(|f| family.as_deref().is_none_or(|n| n == f.name)) {
                    for spec in (f.specs)(arch, config.debug) {
                        println!("# {}\n{}", spec.name, spec.to_toml());
                    }
                }
            }
            Ok(())
        }
        Command::BenchCache { dir } => bench_cache(config, dir),
        Command::BenchFirstHit { dir } => {
            let started = Instant::now();
            let module =
                Cache::new(JitConfig { cache_dir: dir, ..config }, &[]).module(&bench_spec(CudaArch::HOPPER))?;
            println!("{:.3} {:?}", started.elapsed().as_secs_f64() * 1e3, module.origin);
            Ok(())
        }
    }
}

fn parse_archs(list: &str) -> Result<Vec<CudaArch>, JitError> {
    CudaArch::parse_list(list).map_err(|e| JitError::Config { var: "--arch", message: e.to_string() })
}

/// `aot`: builds, prints one line per module, and says whether cubins were made.
fn aot_build(config: &JitConfig, archs: &[CudaArch], family: Option<&str>, out: &Path) -> Result<(), JitError> {
    let modules = aot::build(out, archs, family, config)?;
    for module in &modules {
        let cubin = if module.cubin(module.spec.arch).is_some() { "+cubin" } else { "" };
        println!(
            "{:<28} {:<6} {cubin:<6} {:?}  {}",
            module.spec.name,
            module.spec.arch.target_cpu(),
            module.origin,
            &module.source_key[..16]
        );
    }
    let with_cubin = modules.iter().filter(|m| m.cubin(m.spec.arch).is_some()).count();
    match &config.ptxas {
        Some(ptxas) => println!(
            "cubins: {with_cubin} of {} modules, assembled by {} ({})",
            modules.len(),
            ptxas.display(),
            ferrinfer_jit::ptxas::version(ptxas)
        ),
        None => println!(
            "cubins: skipped, no ptxas (set FERRINFER_PTXAS, e.g. from `pip install nvidia-cuda-nvcc-cu12`); the driver will compile the PTX on first load"
        ),
    }
    println!(
        "AOT directory: {} (run with FERRINFER_AOT_DIR, or embed with FERRINFER_EMBED_AOT_DIR at build time)",
        out.display()
    );
    Ok(())
}

fn bench_spec(arch: CudaArch) -> ferrinfer_jit::JitSpec {
    let bf16 = ferrinfer_kernels::element::DType::Bf16;
    let module = ferrinfer_jit::norm::NormModule {
        kernel: ferrinfer_jit::norm::NormKernel::Rms,
        dtype: bf16,
        weight: bf16,
        vec: 8,
    };
    module.spec(arch, false)
}

/// The cache paths, each timed on its own, with a sysroot directory of the bench's own (so that
/// nothing is already built): `core` for the arch; the first module of the arch, which builds
/// the kernels crate too; the same module in a second cache, the kernels crate already built
/// (what every later module of the arch costs); a disk hit in a fresh cache object; a disk hit
/// in a fresh process (toolchain identity included); an in-process hit.
fn bench_cache(config: JitConfig, dir: Option<PathBuf>) -> Result<(), JitError> {
    let temp = std::env::temp_dir().join(format!("ferrinfer-bench-cache-{}", std::process::id()));
    let dir = dir.unwrap_or(temp);
    let _ = std::fs::remove_dir_all(&dir);
    let (sysroot_dir, cache_dir) = (dir.join("sysroot"), dir.join("cache"));
    let config = JitConfig { cache_dir: dir.join("first"), sysroot_dir, aot_dir: None, disable_jit: false, ..config };
    let spec = bench_spec(CudaArch::HOPPER);
    let toolchain = Toolchain::device(&config.sysroot_dir)?;
    let (core, _) = timed(|| Ok(sysroot::core_sysroot(toolchain, spec.arch, &config.sysroot_dir, None)?))?;
    let (first, _) = timed(|| Cache::new(config.clone(), &[]).module(&spec))?;
    let config = JitConfig { cache_dir: cache_dir.clone(), ..config };
    let (cold, built) = timed(|| Cache::new(config.clone(), &[]).module(&spec))?;
    let disk = Cache::new(config.clone(), &[]);
    let (disk_hit, found) = timed(|| disk.module(&spec))?;
    let iterations = 1_000_000;
    let (in_process, _) = timed(|| {
        (0..iterations).try_for_each(|_| disk.module(std::hint::black_box(&spec)).map(std::hint::black_box).map(drop))
    })?;
    let first_hit = first_hit_in_fresh_process(&cache_dir, &config.sysroot_dir);
    let cubin = built.cubin(spec.arch).map_or("none".into(), |c| format!("{} bytes", c.len()));
    println!(
        "spec {} ({} entry points, PTX {} bytes, cubin {cubin})",
        spec.name,
        spec.entry_points.len(),
        built.ptx.len()
    );
    println!("toolchain {}, ptxas {:?}", toolchain.name, config.ptxas);
    println!("core for {}:           {:>10.3} s", spec.arch.target_cpu(), core);
    println!("first module of the arch: {:>8.3} ms (the kernels crate built too)", first * 1e3);
    println!("cold build ({:?}):      {:>10.3} ms (the kernels crate already built)", built.origin, cold * 1e3);
    println!("disk-cache hit ({:?}):   {:>10.3} ms", found.origin, disk_hit * 1e3);
    println!("first hit, new process: {first_hit}");
    println!("in-process hit:         {:>10.3} µs (mean of {iterations})", in_process / iterations as f64 * 1e6);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `work()`'s result and its wall time in seconds.
fn timed<T>(work: impl FnOnce() -> Result<T, JitError>) -> Result<(f64, T), JitError> {
    let started = Instant::now();
    let result = work()?;
    Ok((started.elapsed().as_secs_f64(), result))
}

/// `bench-first-hit` in a child process: "<ms> <origin>", or why it failed.
fn first_hit_in_fresh_process(dir: &Path, sysroot_dir: &Path) -> String {
    let output = std::env::current_exe().and_then(|exe| {
        let mut child = std::process::Command::new(exe);
        child.arg("bench-first-hit").arg("--dir").arg(dir).env("FERRINFER_JIT_SYSROOT_DIR", sysroot_dir).output()
    });
    match output {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let mut words = text.split_whitespace();
            format!("{:>10} ms ({})", words.next().unwrap_or("?"), words.next().unwrap_or("?"))
        }
        Ok(out) => format!("failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("cannot run: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn cli_help_is_stable() {
        let mut command = Cli::command();
        let help: Vec<String> = std::iter::once(command.render_long_help().to_string())
            .chain(command.get_subcommands_mut().map(|s| s.render_long_help().to_string()))
            .collect();
        insta::assert_snapshot!(help.join("\n----\n"));
    }
}
