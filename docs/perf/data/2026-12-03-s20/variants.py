# Session 20: the edits behind the `linger` and `reread` variants of run 1, applied to
# crates/ferrinfer-kernels/src/norm.rs at c508f11 (python3 variants.py linger|reread), then
# `bash scripts/gpu/variant.sh NAME norm` and the source restored.
import sys, pathlib
p = pathlib.Path("/work/main/crates/ferrinfer-kernels/src/norm.rs")
src = p.read_text()
kind = sys.argv[1]
def sub(a, b):
    global src
    assert src.count(a) == 1, a
    src = src.replace(a, b)
sub("""                    share.x[c] = unsafe { Packed::load::<Coherent>(input.add(at)) };
                    share.residual[c] = unsafe { Packed::load::<Coherent>(residual.add(at)) };
                } else {
                    share.x[c] = unsafe { Packed::load::<L>(input.add(at)) };""",
"""                    share.x[c] = unsafe { Packed::load::<Lingering>(input.add(at)) };
                    share.residual[c] = unsafe { Packed::load::<Lingering>(residual.add(at)) };
                } else {
                    share.x[c] = unsafe { Packed::load::<Lingering>(input.add(at)) };""")
if kind == "reread":
    sub("""        let weights = reloaded.as_ref().unwrap_or(weights);
        for c in 0..CHUNKS {""",
"""        let weights = reloaded.as_ref().unwrap_or(weights);
        let source = if K::FUSED_ADD {
            row_ptr::<T>(p.residual, row, p.residual_row_stride)
        } else {
            row_ptr::<T>(p.input, row, p.input_row_stride)
        };
        for c in 0..CHUNKS {
            if columns.valid(c) && writes {
                share.x[c] = unsafe { Packed::load::<LastRead>(source.add(offsets[c])) };
            }
        }
        for c in 0..CHUNKS {""")
p.write_text(src)
