//! Modules compiled into a binary ahead of time: what a build script writes (from an AOT
//! directory, [`crate::aot::embeddable`]) and what the cache reads back. Both the PTX and the
//! cubin are deflate-compressed — a wheel carrying every family for three architectures holds
//! hundreds of modules, ~80 MB as files, a sixth of that compressed — and inflated once, when a
//! process first asks for the module (about a millisecond for one).

use std::sync::Arc;

use crate::CudaArch;
use crate::entry::{Cubin, Stored};

/// One module embedded in a binary, found by source key.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedModule {
    pub source_key: &'static str,
    /// The spec's arch: what the PTX targets and the cubin runs on.
    pub arch: CudaArch,
    /// The PTX, compressed by [`compress`].
    pub ptx: &'static [u8],
    /// The cubin for the spec's own architecture, compressed by [`compress`], where ptxas made one.
    pub cubin: Option<&'static [u8]>,
}

/// What a build script embeds: the deflate stream (zlib-wrapped, so a damaged one fails its
/// checksum) of `bytes`.
pub fn compress(bytes: &[u8]) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec_zlib(bytes, 9)
}

fn decompress(bytes: &[u8]) -> Option<Vec<u8>> {
    miniz_oxide::inflate::decompress_to_vec_zlib(bytes).ok()
}

impl EmbeddedModule {
    /// The PTX and cubin, inflated; `None` (said on stderr) if either is damaged, and the cache
    /// looks further.
    pub(crate) fn inflate(&self) -> Option<Stored> {
        let ptx = decompress(self.ptx).and_then(|ptx| String::from_utf8(ptx).ok());
        let cubin = self.cubin.map(|c| decompress(c).map(|image| Cubin::in_memory(self.arch, image)));
        let stored = |ptx, cubins| Some(Stored { arch: self.arch, ptx: Arc::new(ptx), cubins });
        match (ptx, cubin) {
            (Some(ptx), None) => stored(ptx, Vec::new()),
            (Some(ptx), Some(Some(cubin))) => stored(ptx, vec![cubin]),
            _ => {
                eprintln!("ferrinfer-jit: embedded module {} is damaged; looking elsewhere", self.source_key);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_modules_inflate_to_what_was_embedded() {
        let (ptx, cubin) = ("// ptx\n.version 8.0\n".repeat(100), vec![7u8; 5000]);
        let module = EmbeddedModule {
            source_key: "k",
            arch: CudaArch::HOPPER,
            ptx: Box::leak(compress(ptx.as_bytes()).into_boxed_slice()),
            cubin: Some(Box::leak(compress(&cubin).into_boxed_slice())),
        };
        assert!(module.ptx.len() < ptx.len() / 10 && module.cubin.unwrap().len() < 100, "compressed");
        let stored = module.inflate().unwrap();
        assert_eq!(*stored.ptx, ptx);
        assert_eq!(stored.cubins[0].arch, CudaArch::HOPPER);
        assert_eq!(*stored.cubins[0].image().unwrap(), cubin[..]);
    }

    #[test]
    fn a_damaged_embedded_module_is_passed_over() {
        let good = Box::leak(compress(b"ptx").into_boxed_slice());
        let damaged: &'static [u8] = Box::leak(good[..good.len() - 1].to_vec().into_boxed_slice());
        let ptx_damaged = EmbeddedModule { source_key: "k", arch: CudaArch::HOPPER, ptx: damaged, cubin: None };
        let cubin_damaged = EmbeddedModule { ptx: good, cubin: Some(damaged), ..ptx_damaged };
        assert!(ptx_damaged.inflate().is_none());
        assert!(cubin_damaged.inflate().is_none());
    }
}
