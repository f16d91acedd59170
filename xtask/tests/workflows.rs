//! The GitHub workflows parse, have the shape GitHub needs, and call only commands that exist.

use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

const XTASK_COMMANDS: &[&str] = &["lint-layers", "ci", "aot", "precommit"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn workflows() -> Vec<(String, Yaml)> {
    let dir = root().join(".github/workflows");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yml" || e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            found.push((path.display().to_string(), docs.remove(0)));
        }
    }
    assert!(!found.is_empty(), "no workflow in {}", dir.display());
    found
}

#[test]
fn workflows_run_on_push_and_pull_request_with_well_formed_jobs() {
    for (path, workflow) in workflows() {
        let on = &workflow["on"];
        assert!(!on["push"].is_badvalue() && !on["pull_request"].is_badvalue(), "{path}: on push and pull_request");
        let jobs = workflow["jobs"].as_hash().unwrap_or_else(|| panic!("{path}: no jobs"));
        for (name, job) in jobs {
            let name = name.as_str().unwrap();
            assert!(job["runs-on"].as_str().is_some(), "{path}: job {name} has no runs-on");
            assert!(job["steps"].as_vec().is_some_and(|s| !s.is_empty()), "{path}: job {name} has no steps");
            if let Some(needed) = job["needs"].as_str() {
                assert!(jobs.keys().any(|k| k.as_str() == Some(needed)), "{path}: {name} needs unknown job {needed}");
            }
        }
    }
}

#[test]
fn workflows_call_only_existing_scripts_and_xtask_commands() {
    for (path, workflow) in workflows() {
        for (_, job) in workflow["jobs"].as_hash().unwrap() {
            for step in job["steps"].as_vec().unwrap() {
                let Some(run) = step["run"].as_str() else { continue };
                for word in run.split_whitespace().collect::<Vec<_>>().windows(3) {
                    if word[0] == "cargo" && word[1] == "xtask" {
                        assert!(XTASK_COMMANDS.contains(&word[2]), "{path}: unknown `cargo xtask {}`", word[2]);
                    }
                    if word[0] == "bash" {
                        assert!(root().join(word[1]).is_file(), "{path}: {} does not exist", word[1]);
                    }
                }
                if run.starts_with("bash ") {
                    let script = run.split_whitespace().nth(1).unwrap();
                    assert!(root().join(script).is_file(), "{path}: {script} does not exist");
                }
            }
        }
    }
}
