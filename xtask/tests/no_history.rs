//! Tidy: the repository describes the product, not the history of its making. No tracked text
//! (sources, docs, scripts, snapshots; binary files and CSV data aside) speaks of numbered work
//! periods or of the tools that reached a GPU machine; a result names the hardware, the driver,
//! the command and the numbers, and the history is in `git log`.

use regex::Regex;

mod common;
use common::{files, root};

/// The history words, case-insensitive, spelled in pieces so that this file passes its own test.
fn history_talk() -> Regex {
    let period = ["ses", "sion"].concat();
    let pattern = format!(r"(?i)\b(?:{period}s?|tool\s+librar(?:y|ies)|device\s+tools?)\b");
    Regex::new(&pattern).unwrap()
}

/// `file:line: text` for each line of `text` that speaks of history.
fn violations(file: &str, text: &str, talk: &Regex) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| talk.is_match(line))
        .map(|(n, line)| format!("{file}:{}: {}", n + 1, line.trim()))
        .collect()
}

#[test]
fn no_tracked_text_speaks_of_history() {
    let (root, talk) = (root(), history_talk());
    let root = root.as_path();
    let mut found = Vec::new();
    for file in files(root).iter().filter(|f| !f.ends_with(".csv")) {
        // Binary files (and deleted ones still in the index) have no text to check.
        let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
        if !text.contains('\0') {
            found.extend(violations(file, &text, &talk));
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) speak of how the code was made, not of the product (history belongs in git log):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn history_talk_is_found_by_file_and_line() {
    let talk = history_talk();
    let period = ["Ses", "sion"].concat();
    let planted = format!(
        "fine\n{period} 12 made it 2× faster\nin {}s 3–5\nthis {}'s run\nthe tool\u{20}library\nthe device\u{20}tool\n",
        period.to_lowercase(),
        period.to_uppercase()
    );
    let found = violations("docs/x.md", &planted, &talk);
    assert_eq!(found.len(), 5, "{found:?}");
    assert_eq!(found[0], format!("docs/x.md:2: {period} 12 made it 2× faster"));
    let product = "the device toolchain, a possession, a sessional fee";
    assert!(violations("a.rs", product, &talk).is_empty());
}
