"""Every ```python block of docs/adapters.md runs as written."""
import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "adapters.md"


def test_adapter_docs_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, f"no python snippet in {DOC}"
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})
