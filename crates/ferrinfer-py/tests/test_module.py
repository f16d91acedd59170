"""The module's shape is FlashInfer's, so `import ferrinfer` replaces `import flashinfer`: every
function also in its family's submodule (`ferrinfer.norm.rmsnorm`), importable by its dotted name,
and `__version__` the installed package's."""
import importlib
import importlib.metadata
import subprocess
import sys
import types

import ferrinfer

# FlashInfer's submodule of each family ferrinfer has (a new family adds its name here).
FLASHINFER_SUBMODULES = ["norm", "activation", "sampling", "cascade", "rope", "page", "decode"]


def public(module, kind):
    # `__all__`: the names the module exports (not maturin's `ferrinfer.ferrinfer`, the extension).
    return {name: getattr(module, name) for name in module.__all__ if isinstance(getattr(module, name), kind)}


def functions(module):
    return public(module, types.BuiltinFunctionType)


def submodules():
    return public(ferrinfer, types.ModuleType)


def test_flashinfers_submodules_are_there():
    assert set(FLASHINFER_SUBMODULES) <= set(submodules())


def test_every_function_is_in_exactly_one_submodule_as_the_same_object():
    top = functions(ferrinfer)
    assert "rmsnorm" in top
    owners = {}
    for family, submodule in submodules().items():
        assert functions(submodule), f"ferrinfer.{family} holds no function"
        for name, function in functions(submodule).items():
            assert top.get(name) is function, f"ferrinfer.{family}.{name} is not ferrinfer.{name}"
            assert function.__module__ == f"ferrinfer.{family}"
            owners.setdefault(name, []).append(family)
    assert owners.keys() == top.keys(), f"in no submodule: {set(top) - set(owners)}"
    assert all(len(families) == 1 for families in owners.values()), owners


def test_submodules_are_registered_under_their_dotted_names():
    for family, submodule in submodules().items():
        assert submodule.__name__ == f"ferrinfer.{family}"
        assert sys.modules[f"ferrinfer.{family}"] is submodule
        assert importlib.import_module(f"ferrinfer.{family}") is submodule


def test_flashinfer_import_forms_work_in_a_fresh_interpreter():
    # Before `ferrinfer` itself is imported: Python imports the parent, then finds the submodule.
    script = """
import ferrinfer.norm
from ferrinfer.sampling import top_p_sampling_from_probs
from ferrinfer import page
assert ferrinfer.norm.rmsnorm is ferrinfer.rmsnorm
assert top_p_sampling_from_probs is ferrinfer.top_p_sampling_from_probs
assert page.append_paged_kv_cache is ferrinfer.append_paged_kv_cache
"""
    subprocess.run([sys.executable, "-c", script], check=True)


def test_version_is_the_installed_packages():
    assert ferrinfer.__version__ == importlib.metadata.version("ferrinfer")
