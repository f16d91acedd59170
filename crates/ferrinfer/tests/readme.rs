//! README.md's Rust example is this crate's doctest (which `cargo test` compiles and runs), word
//! for word: the example a user copies is one that works.

#[test]
fn readme_example_is_the_crate_doctest() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let documented = readme.split("```rust\n").nth(1).and_then(|s| s.split("```").next()).expect("README's rust block");
    let doc: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    let doctest = doc.split("```\n").nth(1).expect("the crate's doctest");
    assert_eq!(documented, doctest, "README.md's example differs from crates/ferrinfer/src/lib.rs's doctest");
}
