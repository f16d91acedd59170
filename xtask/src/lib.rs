//! The commands of `cargo xtask`, as a library so their tests can run them on copies of the
//! workspace. See `main.rs` for what xtask is.

pub mod ci;
pub mod lint_layers;
pub mod precommit;
pub mod python;
