"""Every ```python block of docs/adapters.md runs as written; a ```python cuda block runs where
torch sees a CUDA device and is skipped elsewhere, saying so."""
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "adapters.md"
BLOCKS = re.findall(r"```python( cuda)?\n(.*?)```", DOC.read_text(), re.S)


def cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run(block):
    exec(compile(block, str(DOC), "exec"), {})


def test_adapter_docs_snippets_run():
    host = [code for cuda, code in BLOCKS if not cuda]
    assert host, f"no python snippet in {DOC}"
    for block in host:
        run(block)


def test_adapter_docs_cuda_snippets_run():
    cuda = [code for tag, code in BLOCKS if tag]
    assert cuda, f"no ```python cuda snippet in {DOC}"
    if not cuda_available():
        pytest.skip("SKIPPED: no CUDA device visible to torch (the CUDA snippets need one)")
    for block in cuda:
        run(block)
