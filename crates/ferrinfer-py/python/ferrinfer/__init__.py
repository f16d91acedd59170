"""ferrinfer: FlashInfer's LLM kernels rebuilt in Rust, with FlashInfer's Python API.

The ops and their family submodules (`ferrinfer.norm`, `ferrinfer.decode`, …) come from the
extension module; the stateful wrappers FlashInfer users construct (`plan` on the host, then
`run`) are Python classes over its ops, added to their families' submodules here.
"""

from .ferrinfer import *  # noqa: F401,F403 (the ops, the family submodules, __version__)
from .ferrinfer import __all__ as _extension_names
from . import ferrinfer as _extension
from ._decode import BatchDecodeWithPagedKVCacheWrapper

_extension.decode.BatchDecodeWithPagedKVCacheWrapper = BatchDecodeWithPagedKVCacheWrapper
# The extension's private helpers (`_decode_plan`) are not exported.
__all__ = [name for name in _extension_names if not name.startswith("_")] + ["BatchDecodeWithPagedKVCacheWrapper"]
