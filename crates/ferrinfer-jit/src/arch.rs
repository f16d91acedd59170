//! CUDA architectures as `FERRINFER_CUDA_ARCH_LIST` spells them ("9.0") and rustc wants them
//! (`-C target-cpu=sm_90`). Only architectures that exist are accepted: a typo such as 7.9 would
//! otherwise reach LLVM, which warns and emits PTX for a processor that does not exist.

use std::fmt;
use std::str::FromStr;

/// A compute capability, e.g. 9.0 for Hopper. Serialised as `"9.0"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CudaArch {
    pub major: u32,
    pub minor: u32,
}

/// Every architecture of a shipped GPU that the device toolchain's LLVM accepts as `target-cpu`,
/// with the oldest PTX ISA version that can target it (NVIDIA's PTX ISA, "Release notes"). 10.1
/// (Thor) is 11.0 from CUDA 13 on: both are listed. LLVM's `sm_88` is left out: no GPU reports it.
const KNOWN: &[(CudaArch, PtxVersion)] = &[
    (arch(7, 0), ptx(6, 0)),
    (arch(7, 2), ptx(6, 1)),
    (arch(7, 5), ptx(6, 3)),
    (arch(8, 0), ptx(7, 0)),
    (arch(8, 6), ptx(7, 1)),
    (arch(8, 7), ptx(7, 4)),
    (arch(8, 9), ptx(7, 8)),
    (arch(9, 0), ptx(7, 8)),
    (arch(10, 0), ptx(8, 6)),
    (arch(10, 1), ptx(8, 6)),
    (arch(10, 3), ptx(8, 8)),
    (arch(11, 0), ptx(9, 0)),
    (arch(12, 0), ptx(8, 7)),
    (arch(12, 1), ptx(8, 8)),
];

const fn arch(major: u32, minor: u32) -> CudaArch {
    CudaArch { major, minor }
}

const fn ptx(major: u32, minor: u32) -> PtxVersion {
    PtxVersion { major, minor }
}

/// A PTX ISA version (the `.version` line of a module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PtxVersion {
    pub major: u32,
    pub minor: u32,
}

impl PtxVersion {
    /// Parses `"7.8"`.
    pub fn parse(text: &str) -> Option<PtxVersion> {
        let (major, minor) = text.trim().split_once('.')?;
        Some(PtxVersion { major: major.parse().ok()?, minor: minor.parse().ok()? })
    }
}

impl fmt::Display for PtxVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl CudaArch {
    /// The default build target: the H200 (sm_90).
    pub const HOPPER: CudaArch = arch(9, 0);

    /// What `cargo xtask aot` builds when no architecture is named: Ampere (A100), Ada (L4,
    /// L40) and Hopper (H100, H200).
    pub const AOT_DEFAULT: [CudaArch; 3] = [arch(8, 0), arch(8, 9), arch(9, 0)];

    /// rustc's `target-cpu` name, e.g. `sm_90`.
    pub fn target_cpu(self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }

    /// Every architecture accepted, oldest first.
    pub fn known() -> impl Iterator<Item = CudaArch> {
        KNOWN.iter().map(|(arch, _)| *arch)
    }

    pub fn is_known(self) -> bool {
        Self::known().any(|a| a == self)
    }

    /// The oldest PTX ISA version that can target this architecture; `None` if it is unknown.
    pub fn min_ptx_version(self) -> Option<PtxVersion> {
        KNOWN.iter().find(|(arch, _)| *arch == self).map(|(_, version)| *version)
    }

    /// The newest known architecture a device of compute capability `self` runs (PTX runs on
    /// newer devices): itself if known, `None` if it predates every known one.
    pub fn newest_known_at_most(self) -> Option<CudaArch> {
        Self::known().filter(|a| *a <= self).max()
    }

    /// Parses a list such as `"8.0 9.0"` or `"8.0;9.0"` (FlashInfer's separators); an empty
    /// list is an error, not a request to build nothing.
    pub fn parse_list(list: &str) -> Result<Vec<CudaArch>, ParseArchError> {
        let archs: Vec<CudaArch> =
            list.split([' ', ';', ',']).filter(|s| !s.is_empty()).map(str::parse).collect::<Result<_, _>>()?;
        if archs.is_empty() {
            return Err(ParseArchError(list.to_owned()));
        }
        Ok(archs)
    }
}

impl fmt::Display for CudaArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// An architecture (or list) that names no real CUDA architecture.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a CUDA architecture (list); expected one or more of {known}, e.g. \"9.0\" or \"8.0 9.0\"", known = known_list())]
pub struct ParseArchError(pub String);

/// `7.0 7.2 ... 12.1`.
pub fn known_list() -> String {
    CudaArch::known().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
}

impl FromStr for CudaArch {
    type Err = ParseArchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseArchError(s.to_owned());
        let (major, minor) = s.trim().split_once('.').ok_or_else(invalid)?;
        let parsed = arch(major.parse().map_err(|_| invalid())?, minor.parse().map_err(|_| invalid())?);
        if parsed.is_known() { Ok(parsed) } else { Err(invalid()) }
    }
}

impl TryFrom<String> for CudaArch {
    type Error = ParseArchError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<CudaArch> for String {
    fn from(arch: CudaArch) -> String {
        arch.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flashinfer_style_lists() {
        let archs = CudaArch::parse_list("8.0;9.0 10.0").unwrap();
        let names: Vec<_> = archs.iter().map(|a| a.target_cpu()).collect();
        assert_eq!(names, ["sm_80", "sm_90", "sm_100"]);
    }

    #[test]
    fn rejects_malformed_and_nonexistent_arches() {
        for bad in ["90", "9", "9.x", "6.1", "9.10", "", "7.9", "9.9", "8.8", "13.0"] {
            let err = bad.parse::<CudaArch>().unwrap_err();
            assert!(err.to_string().contains("7.0 7.2 7.5 8.0"), "{err}");
        }
    }

    #[test]
    fn an_empty_list_is_an_error() {
        for empty in ["", " ", ";", " , "] {
            assert!(CudaArch::parse_list(empty).is_err(), "{empty:?} parsed");
        }
    }

    #[test]
    fn known_arches_are_sorted_and_unknown_devices_map_to_the_newest_older_one() {
        let known: Vec<CudaArch> = CudaArch::known().collect();
        assert!(known.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(arch(8, 8).newest_known_at_most(), Some(arch(8, 7)));
        assert_eq!(arch(13, 0).newest_known_at_most(), Some(arch(12, 1)));
        assert_eq!(arch(6, 1).newest_known_at_most(), None);
        assert_eq!(CudaArch::HOPPER.min_ptx_version(), Some(ptx(7, 8)));
    }
}
