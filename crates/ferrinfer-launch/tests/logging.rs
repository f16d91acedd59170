//! API logging at each FERRINFER_LOGLEVEL, to a file (with `%i`) and to stdout. The level is
//! read once per process, so each case runs this test binary again as a child.

use std::process::Command;

use ferrinfer_launch::{Stream, TensorView, rmsnorm, softmax};

/// Child side (a no-op unless started by the tests below): one good call with a NaN and an Inf
/// in its input, then one that fails validation, then a softmax with a temperature a row.
#[test]
fn logging_child() {
    if std::env::var_os("FERRINFER_TEST_LOGGING_CHILD").is_none() {
        return;
    }
    let mut x = vec![1.0f32; 16];
    x[3] = f32::NAN;
    x[5] = f32::INFINITY;
    let w = vec![2.0f32; 8];
    let mut out = vec![0.0f32; 16];
    let (xv, wv) = (TensorView::from_slice(&x, &[2, 8]).unwrap(), TensorView::from_slice(&w, &[8]).unwrap());
    rmsnorm(&xv, &wv, &mut TensorView::from_slice_mut(&mut out, &[2, 8]).unwrap(), 1e-6, Stream::Cpu).unwrap();
    ferrinfer_launch::logging::experimental("test_api", "only for this test");
    ferrinfer_launch::logging::experimental("test_api", "only for this test");
    let short = TensorView::from_slice(&w[..4], &[4]).unwrap();
    assert!(
        rmsnorm(&xv, &short, &mut TensorView::from_slice_mut(&mut out, &[2, 8]).unwrap(), 1e-6, Stream::Cpu).is_err()
    );
    let temperatures = TensorView::from_slice(&w[..2], &[2]).unwrap();
    let logits = TensorView::from_slice(&w, &[2, 4]).unwrap();
    softmax(&logits, &mut TensorView::from_slice_mut(&mut out[..8], &[2, 4]).unwrap(), &temperatures, Stream::Cpu)
        .unwrap();
}

/// Runs the child at `level` logging to `dest`; returns (log file text or "", child stdout).
fn run_child(level: &str, dest: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dest.replace("DIR", &dir.path().display().to_string());
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "logging_child", "--nocapture", "--test-threads=1"])
        .env("FERRINFER_TEST_LOGGING_CHILD", "1")
        .env("FERRINFER_LOGLEVEL", level)
        .env("FERRINFER_LOGDEST", &dest)
        .output()
        .unwrap();
    assert!(output.status.success(), "child failed: {}", String::from_utf8_lossy(&output.stderr));
    let logged = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    (logged, String::from_utf8_lossy(&output.stdout).into_owned())
}

fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(needle)).collect()
}

#[test]
fn logging_level_0_writes_only_experimental_warnings_once() {
    let (log, stdout) = run_child("0", "DIR/log-%i.txt");
    assert_eq!(log, "[ferrinfer] warning: test_api is experimental: only for this test\n");
    assert!(!stdout.contains("[ferrinfer]"));
}

#[test]
fn logging_level_1_names_every_call_even_failing_ones() {
    let (log, _) = run_child("1", "DIR/log-%i.txt");
    let calls = [
        "[ferrinfer] rmsnorm",
        "[ferrinfer] warning: test_api is experimental: only for this test",
        "[ferrinfer] rmsnorm",
        "[ferrinfer] softmax",
    ];
    assert_eq!(log.lines().collect::<Vec<_>>(), calls, "{log}");
}

#[test]
fn logging_level_3_adds_arguments_and_outputs() {
    let (log, _) = run_child("3", "DIR/log-%i.txt");
    assert_eq!(lines_with(&log, "  input: shape [2, 8] strides [8, 1] f32 on cpu").len(), 2, "{log}");
    assert_eq!(lines_with(&log, "  weight: shape [4] strides [1] f32 on cpu").len(), 1, "{log}");
    assert_eq!(lines_with(&log, "  eps = 0.000001").len(), 2, "{log}");
    assert_eq!(lines_with(&log, "  temperature: shape [2] strides [1] f32 on cpu (one a row)").len(), 1, "{log}");
    assert_eq!(lines_with(&log, "rmsnorm done; out: shape [2, 8]").len(), 1, "only the good call finishes: {log}");
    assert!(lines_with(&log, "stats").is_empty());
}

#[test]
fn logging_level_5_adds_input_statistics() {
    let (log, _) = run_child("5", "DIR/log-%i.txt");
    let stats = lines_with(&log, "input stats:");
    assert_eq!(stats, ["[ferrinfer]   input stats: min 1.000000 max 1.000000 mean 1.000000 nan 1 inf 1"], "{log}");
    assert_eq!(lines_with(&log, "weight stats: min 2.000000 max 2.000000 mean 2.000000 nan 0 inf 0").len(), 1, "{log}");
}

#[test]
fn logging_to_stdout_and_file_names_with_the_process_id() {
    let (log, stdout) = run_child("1", "stdout");
    assert_eq!((log.as_str(), lines_with(&stdout, "[ferrinfer] rmsnorm").len()), ("", 2));
    assert_eq!(lines_with(&stdout, "experimental").len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "logging_child", "--test-threads=1"])
        .env("FERRINFER_TEST_LOGGING_CHILD", "1")
        .env("FERRINFER_LOGLEVEL", "1")
        .env("FERRINFER_LOGDEST", dir.path().join("run-%i.log"))
        .output()
        .unwrap();
    assert!(output.status.success());
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(
        names.len() == 1 && names[0].starts_with("run-") && names[0][4..names[0].len() - 4].parse::<u32>().is_ok(),
        "{names:?}"
    );
}
