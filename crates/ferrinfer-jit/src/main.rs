//! `ferrinfer-jit`: the JIT's command line — build modules ahead of time (`aot`, what
//! `cargo xtask aot` runs), print specs, and time the cache (`bench-cache`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use ferrinfer_jit::{Cache, CudaArch, FAMILIES, JitConfig, JitError, Origin, aot};

#[derive(Parser)]
#[command(name = "ferrinfer-jit", about = "Build and inspect ferrinfer's kernel modules", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build every module of a family (default: all) into an AOT directory.
    Aot {
        /// Target architectures, e.g. "9.0" or "8.0 9.0" (default: FERRINFER_CUDA_ARCH_LIST, else 9.0).
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
    /// Time a cold build, a disk-cache hit and an in-process hit of one norm module.
    BenchCache {
        /// Cache directory to use; it is emptied first (default: a fresh temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
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
                None => config.arch_list.clone().unwrap_or(vec![CudaArch::HOPPER]),
            };
            for module in aot::build(&out, &archs, family.as_deref(), &config)? {
                println!(
                    "{:<28} {}  {:?}  {}",
                    module.spec.name,
                    module.spec.arch.target_cpu(),
                    module.origin,
                    &module.source_key[..16]
                );
            }
            println!(
                "AOT directory: {} (run with FERRINFER_AOT_DIR, or embed with FERRINFER_EMBED_AOT_DIR at build time)",
                out.display()
            );
            Ok(())
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
    }
}

fn parse_archs(list: &str) -> Result<Vec<CudaArch>, JitError> {
    CudaArch::parse_list(list).map_err(|e| JitError::Config { var: "--arch", message: e.to_string() })
}

/// The three cache paths, each timed on its own: a cold build (core already built in the shared
/// target directory), a disk hit in a fresh cache object, and an in-process hit.
fn bench_cache(config: JitConfig, dir: Option<PathBuf>) -> Result<(), JitError> {
    let temp = std::env::temp_dir().join(format!("ferrinfer-bench-cache-{}", std::process::id()));
    let dir = dir.unwrap_or(temp);
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = JitConfig { cache_dir: dir.clone(), aot_dir: None, disable_jit: false, ..config };
    config.target_dir = config.target_dir.clone();
    let bf16 = ferrinfer_kernels::element::DType::Bf16;
    let module = ferrinfer_jit::norm::NormModule {
        kernel: ferrinfer_jit::norm::NormKernel::Rms,
        dtype: bf16,
        weight: bf16,
        vec: 8,
    };
    let spec = module.spec(CudaArch::HOPPER, false);
    let warm = Cache::new(config.clone(), &[]);
    warm.keys(&spec)?; // queries the toolchain once, outside the timings
    let time = |cache: &Cache| -> Result<(f64, Origin), JitError> {
        let started = Instant::now();
        let origin = cache.module(&spec)?.origin;
        Ok((started.elapsed().as_secs_f64(), origin))
    };
    let (cold, cold_origin) = time(&warm)?;
    let disk = Cache::new(config.clone(), &[]);
    let (disk_hit, disk_origin) = time(&disk)?;
    let iterations = 100_000;
    let started = Instant::now();
    for _ in 0..iterations {
        disk.module(&spec)?;
    }
    let in_process = started.elapsed().as_secs_f64() / iterations as f64;
    println!("spec {} (target dir {})", spec.name, config.target_dir.display());
    println!("cold build ({cold_origin:?}):   {:>10.3} ms", cold * 1e3);
    println!("disk-cache hit ({disk_origin:?}): {:>10.3} ms", disk_hit * 1e3);
    println!("in-process hit:        {:>10.3} µs (mean of {iterations})", in_process * 1e6);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
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
