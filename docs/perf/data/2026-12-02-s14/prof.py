"""Session 14 run 5: one call of each weighing sampling op on softmax rows (as the Python bench's),
for ncu: FERRINFER ops named by argv[1], f32 V=128256 B=256 unless argv[2:] say otherwise."""
import sys, torch, ferrinfer
op = sys.argv[1]
V, B = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (128256, 256)
torch.manual_seed(0)
probs = torch.softmax(torch.randn(B, V, device="cuda"), dim=-1)
out = torch.empty(B, dtype=torch.int32, device="cuda")
f = getattr(ferrinfer, op)
args = {"top_p_sampling_from_probs": (0.9,), "min_p_sampling_from_probs": (0.1,)}.get(op, ())
for _ in range(3):
    f(probs, *args, 7, 0, samples=out)
torch.cuda.synchronize()
