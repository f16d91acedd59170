//! CUDA architectures as `FERRINFER_CUDA_ARCH_LIST` spells them ("9.0") and rustc wants them
//! (`-C target-cpu=sm_90`).

use std::fmt;
use std::str::FromStr;

/// A compute capability, e.g. 9.0 for Hopper. Serialised as `"9.0"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CudaArch {
    pub major: u32,
    pub minor: u32,
}

impl CudaArch {
    /// The default build target: the H200 (sm_90).
    pub const HOPPER: CudaArch = CudaArch { major: 9, minor: 0 };

    /// rustc's `target-cpu` name, e.g. `sm_90`.
    pub fn target_cpu(self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }

    /// Parses a list such as `"8.0 9.0"` or `"8.0;9.0"` (FlashInfer's separators).
    pub fn parse_list(list: &str) -> Result<Vec<CudaArch>, ParseArchError> {
        list.split([' ', ';', ',']).filter(|s| !s.is_empty()).map(str::parse).collect()
    }
}

impl fmt::Display for CudaArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// An architecture string that is not `MAJOR.MINOR` with single-digit minor, sm_70 or newer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CUDA architecture {0:?}: expected MAJOR.MINOR, 7.0 or newer (e.g. \"9.0\")")]
pub struct ParseArchError(pub String);

impl FromStr for CudaArch {
    type Err = ParseArchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseArchError(s.to_owned());
        let (major, minor) = s.trim().split_once('.').ok_or_else(invalid)?;
        let arch =
            CudaArch { major: major.parse().map_err(|_| invalid())?, minor: minor.parse().map_err(|_| invalid())? };
        if arch.major < 7 || arch.minor > 9 {
            return Err(invalid());
        }
        Ok(arch)
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
    fn rejects_malformed_arches() {
        for bad in ["90", "9", "9.x", "6.1", "9.10", ""] {
            assert!(bad.parse::<CudaArch>().is_err(), "{bad:?} parsed");
        }
    }
}
