//! `cargo xtask perf-table`: README.md's speed table, made from the benchmark CSVs behind the
//! families' tables (`docs/perf/data/<family>-<gpu>.csv`), so the README cannot drift from them.
//!
//! A CSV has the header `op,dtype,T,H,impl,us,tbps` (what `crates/ferrinfer-py/bench/ops.py`
//! writes); `impl` is ours (`ferrinfer-py`), a peer (`torch_eager`, `torch_compile`,
//! `flashinfer`, `flashinfer_tc` — FlashInfer's tensor-core decode) or anything else, which is
//! ignored. For each family, dtype and GPU the table
//! gives, over every point `(op, T, H)` timed for us and at least one peer, the best peer's time
//! over ours: its least, median and greatest value (above 1: faster than every peer).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};

/// Where the CSVs are, from the repository root.
pub const DATA_DIR: &str = "docs/perf/data";
/// The README's generated block lies between these lines.
pub const BEGIN: &str = "<!-- perf-table:begin -->";
pub const END: &str = "<!-- perf-table:end -->";

const HEADER: &str = "op,dtype,T,H,impl,us,tbps";
const OURS: &str = "ferrinfer-py";
const PEERS: &[&str] = &["torch_eager", "torch_compile", "flashinfer", "flashinfer_tc"];
const GPUS: &[&str] = &["h100", "h200"];

/// One CSV: its file name (`<family>-<gpu>.csv`) and contents.
pub struct Csv {
    pub name: String,
    pub text: String,
}

/// A row of the table: the ratios (best peer µs / ours µs) of one family, dtype and GPU.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub family: String,
    pub dtype: String,
    pub gpu: String,
    pub ratios: Vec<f64>,
}

/// The `*.csv` files directly in `root/docs/perf/data` (none if it does not exist), by name.
pub fn read_csvs(root: &Path) -> Result<Vec<Csv>> {
    let dir = root.join(DATA_DIR);
    let Ok(entries) = fs::read_dir(&dir) else { return Ok(Vec::new()) };
    let mut csvs = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "csv") {
            let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            csvs.push(Csv { name: path.file_name().unwrap_or_default().to_string_lossy().into_owned(), text });
        }
    }
    csvs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(csvs)
}

/// `(family, gpu)` of a file named `<family>-<gpu>.csv`.
fn family_and_gpu(name: &str) -> Result<(&str, &str)> {
    let stem = name.strip_suffix(".csv").unwrap_or(name);
    match stem.rsplit_once('-') {
        Some((family, gpu)) if !family.is_empty() && GPUS.contains(&gpu) => Ok((family, gpu)),
        _ => bail!("{DATA_DIR}/{name}: expected a name `<family>-<gpu>.csv`, gpu one of {}", GPUS.join(", ")),
    }
}

/// A row of ours or a peer's.
struct Row<'a> {
    op: &'a str,
    dtype: &'a str,
    t: &'a str,
    h: &'a str,
    implementation: &'a str,
    us: f64,
}

/// The rows of ours and the peers in `csv`; an error names the file and line of a malformed or
/// repeated row.
fn rows(csv: &Csv) -> Result<Vec<Row<'_>>> {
    let mut lines = csv.text.lines().enumerate();
    let header = lines.next().map(|(_, line)| line.trim());
    ensure!(header == Some(HEADER), "{DATA_DIR}/{}:1: expected the header `{HEADER}`", csv.name);
    let mut rows = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (n, line) in lines.filter(|(_, line)| !line.trim().is_empty()) {
        let at = || format!("{DATA_DIR}/{}:{}", csv.name, n + 1);
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [op, dtype, t, h, implementation, us, _] = fields[..] else {
            bail!("{}: expected 7 fields ({HEADER}), found {}", at(), fields.len());
        };
        if implementation != OURS && !PEERS.contains(&implementation) {
            continue;
        }
        let point = (op, dtype, t, h, implementation);
        ensure!(seen.insert(point), "{}: a second row of {op} {dtype} T={t} H={h} {implementation}", at());
        let us: f64 = us
            .parse()
            .ok()
            .filter(|us: &f64| us.is_finite() && *us > 0.0)
            .with_context(|| format!("{}: expected a time in µs above 0, found `{us}`", at()))?;
        rows.push(Row { op, dtype, t, h, implementation, us });
    }
    Ok(rows)
}

/// Times at one point `(op, T, H)` of a family, dtype and GPU: ours and the best peer's.
#[derive(Default)]
struct Point {
    ours: Option<f64>,
    best_peer: Option<f64>,
}

/// `(family, dtype, gpu)`: what a row of the table summarises.
type Group = (String, String, String);
/// `(op, T, H)`.
type PointKey = (String, String, String);

/// The table's rows, by family, dtype and GPU.
pub fn summaries(csvs: &[Csv]) -> Result<Vec<Summary>> {
    let mut groups: BTreeMap<Group, BTreeMap<PointKey, Point>> = BTreeMap::new();
    for csv in csvs {
        let (family, gpu) = family_and_gpu(&csv.name)?;
        for row in rows(csv)? {
            let group = (family.to_owned(), row.dtype.to_owned(), gpu.to_owned());
            let key = (row.op.to_owned(), row.t.to_owned(), row.h.to_owned());
            let point = groups.entry(group).or_default().entry(key).or_default();
            if row.implementation == OURS {
                point.ours = Some(row.us);
            } else {
                point.best_peer = Some(point.best_peer.map_or(row.us, |best| best.min(row.us)));
            }
        }
    }
    Ok(groups
        .into_iter()
        .map(|((family, dtype, gpu), points)| {
            let mut ratios: Vec<f64> = points.values().filter_map(|p| Some(p.best_peer? / p.ours?)).collect();
            ratios.sort_by(f64::total_cmp);
            Summary { family, dtype, gpu, ratios }
        })
        .collect())
}

fn median(sorted: &[f64]) -> f64 {
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 }
}

/// The README's generated block, markers included: the table (or a line saying there is no
/// data yet) and where it comes from, linking `docs/perf/<family>.md` for each of `families`.
pub fn render(summaries: &[Summary], families: &[String]) -> String {
    let mut block = format!("{BEGIN}\n");
    if summaries.is_empty() {
        let _ = writeln!(block, "No benchmark results in `{DATA_DIR}` yet.\n");
    } else {
        block.push_str("| family | dtype | GPU | points | min | median | max |\n|---|---|---|--:|--:|--:|--:|\n");
        for s in summaries {
            let gpu = s.gpu.to_uppercase();
            let stats = match (s.ratios.first(), s.ratios.last()) {
                (Some(min), Some(max)) => format!("{min:.2} | {:.2} | {max:.2}", median(&s.ratios)),
                _ => "— | — | —".to_owned(),
            };
            let _ = writeln!(block, "| {} | {} | {gpu} | {} | {stats} |", s.family, s.dtype, s.ratios.len());
        }
        block.push('\n');
    }
    let links: Vec<String> = families.iter().map(|f| format!("[{f}](docs/perf/{f}.md)")).collect();
    let links = if links.is_empty() { "none yet".to_owned() } else { links.join(", ") };
    let _ = writeln!(
        block,
        "Each ratio: the best peer's time (torch eager, torch.compile, FlashInfer) over the Python\n\
         module's at one point (op, T, H); above 1, faster than every peer. Generated by `cargo xtask\n\
         perf-table` from `{DATA_DIR}/<family>-<gpu>.csv`. Each op's numbers, and how they are\n\
         measured: {links}."
    );
    block.push_str(END);
    block
}

/// `readme` with the text from the line `BEGIN` to the line `END` replaced by `block`.
pub fn splice(readme: &str, block: &str) -> Result<String> {
    let begin = readme.find(BEGIN).with_context(|| format!("README.md has no line `{BEGIN}`"))?;
    let end = readme[begin..].find(END).with_context(|| format!("README.md has no line `{END}` after `{BEGIN}`"))?;
    Ok(format!("{}{block}{}", &readme[..begin], &readme[begin + end + END.len()..]))
}

/// The families with a page `docs/perf/<family>.md`, in name order.
fn documented_families(root: &Path) -> Result<Vec<String>> {
    let families = crate::ci::families(root)?;
    Ok(families.into_iter().filter(|f| root.join(format!("docs/perf/{f}.md")).is_file()).collect())
}

/// Writes README.md's table; with `check`, fails instead if README.md differs from it.
pub fn run(root: &Path, check: bool) -> Result<()> {
    let path = root.join("README.md");
    let current = fs::read_to_string(&path).context("reading README.md")?;
    let block = render(&summaries(&read_csvs(root)?)?, &documented_families(root)?);
    let generated = splice(&current, &block)?;
    if check {
        ensure_up_to_date(&current, &generated)?;
        eprintln!("perf-table: README.md is up to date");
        return Ok(());
    }
    fs::write(&path, generated).context("writing README.md")
}

fn ensure_up_to_date(current: &str, generated: &str) -> Result<()> {
    ensure!(
        current == generated,
        "README.md's speed table differs from the CSVs in {DATA_DIR}: run `cargo xtask perf-table`"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(name: &str, rows: &[&str]) -> Csv {
        Csv { name: name.into(), text: format!("{HEADER}\n{}\n", rows.join("\n")) }
    }

    fn sample() -> Vec<Csv> {
        vec![
            csv(
                "norm-h200.csv",
                &[
                    "rmsnorm,bfloat16,1,4096,torch_eager,10.0,0.1",
                    "rmsnorm,bfloat16,1,4096,flashinfer,4.0,0.1",
                    "rmsnorm,bfloat16,1,4096,ferrinfer-py,5.0,0.1",
                    "rmsnorm,bfloat16,128,4096,torch_compile,6.0,0.1",
                    "rmsnorm,bfloat16,128,4096,ferrinfer-py,3.0,0.1",
                    "fused_add_rmsnorm,bfloat16,1,4096,flashinfer,9.0,0.1",
                    "fused_add_rmsnorm,bfloat16,1,4096,ferrinfer-py,6.0,0.1",
                    "fused_add_rmsnorm,bfloat16,1,4096,ferrinfer-py_eager,1.0,0.1",
                    "rmsnorm,bfloat16,4096,4096,ferrinfer-py,7.0,0.1",
                    "rmsnorm,float32,1,4096,flashinfer,1.0,0.1",
                    "rmsnorm,float32,1,4096,ferrinfer-py,4.0,0.1",
                ],
            ),
            csv("norm-h100.csv", &["rmsnorm,bfloat16,1,4096,ferrinfer-py,5.0,0.1"]),
        ]
    }

    #[test]
    fn ratios_are_the_best_peer_over_ours_at_points_with_both() {
        let rows = summaries(&sample()).unwrap();
        let row = |dtype: &str, gpu: &str| rows.iter().find(|s| s.dtype == dtype && s.gpu == gpu).unwrap();
        // 4/5 (FlashInfer beats eager), 6/3, 9/6; the T = 4096 point has no peer, the eager row is no impl.
        assert_eq!(row("bfloat16", "h200").ratios, [0.8, 1.5, 2.0]);
        assert_eq!(row("float32", "h200").ratios, [0.25]);
        assert!(row("bfloat16", "h100").ratios.is_empty(), "ours alone: no point");
        assert_eq!(rows.len(), 3);
    }

    #[test]
    fn the_table_gives_min_median_and_max() {
        let block = render(&summaries(&sample()).unwrap(), &["norm".into()]);
        let expected = "\
| norm | bfloat16 | H100 | 0 | — | — | — |
| norm | bfloat16 | H200 | 3 | 0.80 | 1.50 | 2.00 |
| norm | float32 | H200 | 1 | 0.25 | 0.25 | 0.25 |
";
        assert!(block.contains(expected), "{block}");
        assert!(block.starts_with(BEGIN) && block.ends_with(END), "{block}");
        assert!(block.contains("[norm](docs/perf/norm.md)"), "{block}");
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), 3.0);
    }

    #[test]
    fn no_csvs_give_a_line_saying_so() {
        let block = render(&[], &[]);
        assert!(block.contains("No benchmark results in `docs/perf/data` yet."), "{block}");
        assert!(!block.contains("| family |"), "{block}");
    }

    #[test]
    fn a_readme_differing_from_its_csvs_fails_the_check() {
        let block = render(&summaries(&sample()).unwrap(), &["norm".into()]);
        let readme = splice(&format!("# x\n\n{BEGIN}\n{END}\n\n## Next\n"), &block).unwrap();
        assert!(ensure_up_to_date(&readme, &splice(&readme, &block).unwrap()).is_ok());
        let planted = readme.replace("| 0.80 |", "| 0.81 |");
        assert_ne!(planted, readme);
        let error = ensure_up_to_date(&planted, &splice(&planted, &block).unwrap()).unwrap_err();
        assert!(error.to_string().contains("run `cargo xtask perf-table`"), "{error}");
        assert!(splice("# no markers\n", &block).unwrap_err().to_string().contains(BEGIN));
    }

    #[test]
    fn a_workspace_is_written_then_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for file in ["crates/ferrinfer-kernels/src/norm.rs", "crates/ferrinfer-launch/src/norm.rs", "docs/perf/norm.md"]
        {
            fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
            fs::write(root.join(file), "").unwrap();
        }
        fs::write(root.join("README.md"), format!("# x\n{BEGIN}\n{END}\n")).unwrap();
        assert!(run(root, true).is_err(), "the empty block is not what no CSV makes");
        run(root, false).unwrap();
        assert!(fs::read_to_string(root.join("README.md")).unwrap().contains("No benchmark results"));
        fs::create_dir_all(root.join(DATA_DIR)).unwrap();
        let [norm, _] = sample().try_into().ok().unwrap();
        fs::write(root.join(DATA_DIR).join(&norm.name), &norm.text).unwrap();
        assert!(run(root, true).is_err(), "a new CSV changes the table");
        run(root, false).unwrap();
        run(root, true).unwrap();
        assert!(fs::read_to_string(root.join("README.md")).unwrap().contains("| norm | float32 | H200 | 1 |"));
    }

    #[test]
    fn malformed_files_and_rows_are_errors_naming_them() {
        let error = |csvs: Vec<Csv>| summaries(&csvs).unwrap_err().to_string();
        assert!(error(vec![csv("norm-a100.csv", &[])]).contains("docs/perf/data/norm-a100.csv: expected a name"));
        let bad_header = Csv { name: "norm-h100.csv".into(), text: "op,dtype,us\n".into() };
        assert!(error(vec![bad_header]).contains("norm-h100.csv:1: expected the header"));
        let twice = csv("norm-h100.csv", &["rmsnorm,f32,1,8,flashinfer,1.0,0", "rmsnorm,f32,1,8,flashinfer,2.0,0"]);
        assert!(error(vec![twice]).contains("norm-h100.csv:3: a second row of rmsnorm f32 T=1 H=8 flashinfer"));
        let no_time = csv("norm-h100.csv", &["rmsnorm,f32,1,8,flashinfer,nan,0"]);
        assert!(error(vec![no_time]).contains("norm-h100.csv:2: expected a time in µs above 0, found `nan`"));
    }

    #[test]
    fn the_readme_table_is_the_one_the_csvs_make() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let result = run(root, true);
        assert!(result.is_ok(), "{:#}", result.unwrap_err());
    }
}
