//! Hex digests: what names files by their contents (module keys, the sysroot's directory, the
//! toolchain's recorded identity).

use sha2::{Digest, Sha256};

/// Hex SHA-256 of bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `bytes` in lower-case hex, two digits a byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
