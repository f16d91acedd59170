"""Session 30: session 13's layout sweep (docs/perf/data/2026-12-02-s13/sweep.py, run from the
repository root with the same arguments) with its rows seeded, so that top-p's rejection rounds,
and so its times, are alike in every process of the sweep."""
import runpy
import sys

import torch

torch.manual_seed(7)
sys.argv[0] = "docs/perf/data/2026-12-02-s13/sweep.py"
runpy.run_path(sys.argv[0], run_name="__main__")
