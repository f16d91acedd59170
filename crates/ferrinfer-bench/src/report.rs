//! Results: CSV rows in the peers' columns (stdout, and appended to `--output-path`), then a short
//! human table. A failed refcheck is reported in the table and fails the run.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

use ferrinfer_launch::DType;
use ferrinfer_launch::reference::Agreement;

pub const CSV_HEADER: &str = "op,dtype,T,H,impl,us,tbps";

pub struct Row {
    op: &'static str,
    dtype: DType,
    tokens: usize,
    hidden: usize,
    implementation: &'static str,
    us: f64,
    tbps: f64,
    refcheck: Option<Result<Agreement, String>>,
}

impl Row {
    #[allow(clippy::too_many_arguments)] // one per CSV column
    pub fn new(
        op: &'static str,
        dtype: DType,
        tokens: usize,
        hidden: usize,
        implementation: &'static str,
        us: f64,
        bytes: f64,
        refcheck: Option<Result<Agreement, String>>,
    ) -> Self {
        Row { op, dtype, tokens, hidden, implementation, us, tbps: bytes / us / 1e6, refcheck }
    }

    /// The peers' spelling of the dtype (torch's names).
    fn dtype_name(&self) -> &'static str {
        match self.dtype {
            DType::Bf16 => "bfloat16",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::I32 => "int32",
            DType::I64 => "int64",
        }
    }

    pub fn csv(&self) -> String {
        let (op, dtype, t, h, imp) = (self.op, self.dtype_name(), self.tokens, self.hidden, self.implementation);
        format!("{op},{dtype},{t},{h},{imp},{:.3},{:.3}", self.us, self.tbps)
    }

    fn refcheck_text(&self) -> String {
        match &self.refcheck {
            None => "-".into(),
            Some(Ok(a)) => format!("ok (rel {:.1e})", a.relative_error),
            Some(Err(e)) => format!("FAILED: {e}"),
        }
    }
}

pub struct Report {
    rows: Vec<Row>,
    output_path: Option<PathBuf>,
}

impl Report {
    pub fn new(output_path: Option<PathBuf>) -> Self {
        Report { rows: Vec::new(), output_path }
    }

    /// Prints the row's CSV line, appends it to the output file, keeps it for the table.
    pub fn push(&mut self, row: Row) -> std::io::Result<()> {
        println!("{}", row.csv());
        if let Some(path) = &self.output_path {
            let is_new = !path.exists() || std::fs::metadata(path)?.len() == 0;
            let mut file = OpenOptions::new().create(true).append(true).open(path)?;
            if is_new {
                writeln!(file, "{CSV_HEADER}")?;
            }
            writeln!(file, "{}", row.csv())?;
        }
        self.rows.push(row);
        Ok(())
    }

    pub fn print_table(&self) {
        println!(
            "\n{:<18} {:<9} {:>6} {:>6} {:<14} {:>10} {:>7}  refcheck",
            "op", "dtype", "T", "H", "impl", "us", "TB/s"
        );
        for r in &self.rows {
            println!(
                "{:<18} {:<9} {:>6} {:>6} {:<14} {:>10.3} {:>7.3}  {}",
                r.op,
                r.dtype_name(),
                r.tokens,
                r.hidden,
                r.implementation,
                r.us,
                r.tbps,
                r.refcheck_text()
            );
        }
    }

    /// An error listing every failed refcheck, if any.
    pub fn failures(&self) -> Result<(), String> {
        let failed: Vec<String> = self
            .rows
            .iter()
            .filter(|r| matches!(r.refcheck, Some(Err(_))))
            .map(|r| format!("{} T={} H={}: {}", r.op, r.tokens, r.hidden, r.refcheck_text()))
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(format!("refcheck failed:\n{}", failed.join("\n"))) }
    }
}
