#!/usr/bin/env bash
# Builds a code-generation variant of some families' kernels for one GPU run, beside the bundle:
# .bundle/aot-NAME.tar.xz holds the working tree's modules of FAMILIES (default: norm activation)
# filed under the *bundle's* source keys, so the bundle's binaries load them in place of their
# own (suite step `variants`: every variant at each case, beside the bundle's kernels).
# Usage: edit the kernels, `bash scripts/gpu/variant.sh NAME [FAMILY...]`, revert the edit.
# Run after scripts/gpu/bundle.sh (it reads .bundle/aot.tar.xz). An experiment tool: what a
# variant shows is measured, then the winning change is committed and bundled the normal way.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
name=$1; shift
families=${*:-norm activation}
base=$(mktemp -d) variant=$(mktemp -d)
tar xJf .bundle/aot.tar.xz -C "$base"
FERRINFER_PTXAS="${FERRINFER_PTXAS:-$(python3 -c 'import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])')/bin/ptxas}"
for family in $families; do
  FERRINFER_PTXAS="$FERRINFER_PTXAS" FERRINFER_REQUIRE_PTXAS=1 \
    cargo xtask aot --arch "${FERRINFER_CUDA_ARCH_LIST:-9.0}" --family "$family" --out "$variant"
done
python3 - "$base" "$variant" <<'PY'
import pathlib, re, sys
base, variant = (pathlib.Path(p) / "ptx" for p in sys.argv[1:])
field = lambda text, name: re.search(rf'^{name} = "([^"]*)"', text, re.M).group(1)
keys = {field(m.read_text(), "spec"): field(m.read_text(), "source_key") for m in base.glob("*/manifest.toml")}
for manifest in variant.glob("*/manifest.toml"):
    text = manifest.read_text()
    spec = field(text, "spec")
    if spec not in keys:
        sys.exit(f"variant module {spec} is not in the bundle")
    manifest.write_text(re.sub(r'^source_key = "[^"]*"', f'source_key = "{keys[spec]}"', text, flags=re.M))
PY
tar cJf ".bundle/aot-$name.tar.xz" -C "$variant" ptx
rm -rf "$base" "$variant"
ls -l ".bundle/aot-$name.tar.xz"
