"""Replay `horovod-q8 bench auto` logs against Auto's cost model: for each log (one cell of
`bash scripts/bench_auto.sh`), what the model predicts from the calibration the run printed,
beside what the run measured, for the lone tensor and for ResNet-50's step, what Auto
would choose, and what that choice would cost by the fixed formats' measured times (a step of
mixed choices: each bucket at its format's step time, by its share of the elements) against
the fastest of them. Edit `collective/auto.py` and run this again to see what a change of the
model does to every cell measured, without measuring again.

    python scripts/auto_replay.py docs/runs/auto/<date>-<commit>/*.log
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from horovod_q8.bench import auto_report  # noqa: E402
from horovod_q8.collective import auto as A  # noqa: E402

FORMATS = ("none", "fp16", "q8")
TENSOR = 25_600_000  # bench auto's one tensor


def parse(path: Path) -> Tuple[A.Calibration, List[int], Dict[str, Dict[str, float]]]:
    """(calibration, ResNet-50's bucket sizes, measured ms per workload and compression)."""
    log = auto_report.parse(path.read_text())
    if log["calibration"] is None or log["buckets"] is None:
        raise SystemExit(f"{path}: no calibration or bucket line (logs of bench auto from ffa6e92 on)")
    measured = {"tensor" if table["title"].startswith("hvd.allreduce") else "resnet": table["ms"]
                for table in log["tables"]}
    return A.Calibration.from_dict(log["calibration"]), log["buckets"], measured


def replay(path: Path) -> Tuple[str, float, List[float]]:
    """One line for this log, the mean |log(predicted / measured)| of its six figures, and for
    each workload how much slower than the fastest fixed format the replayed choice would be."""
    cal, buckets, measured = parse(path)
    plan = A.AutoPlan(A.Auto(), cal)
    step = sum(buckets)
    predicted = {"tensor": {f: plan.predict(f, TENSOR) * 1e3 for f in FORMATS},
                 "resnet": {f: sum(plan.predict(f, b, step) for b in buckets) * 1e3 for f in FORMATS}}
    shares = {"tensor": [(plan.choose(TENSOR).name, 1.0)],
              "resnet": [(c.name, c.n / step) for c in plan.choose_step(buckets)]}
    chosen = {workload: "+".join(sorted({f for f, _ in picks})) for workload, picks in shares.items()}
    parts, errs, behind = [], [], []
    for workload in ("tensor", "resnet"):
        m, p = measured[workload], predicted[workload]
        errs += [abs(math.log(p[f] / m[f])) for f in FORMATS]
        fastest = min(FORMATS, key=m.get)
        behind.append(sum(m[f] * share for f, share in shares[workload]) / m[fastest] - 1)
        cells = " ".join(f"{f} {m[f]:.0f}/{p[f]:.0f}" for f in FORMATS)
        parts.append(f"{workload}: {cells}, chose {chosen[workload]} {behind[-1]:+.1%} (fastest {fastest}, "
                     f"auto {m['auto']:.0f})")
    return f"{path.parent.name}/{path.stem}: " + "; ".join(parts), sum(errs) / len(errs), behind


def main(argv: List[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    print("# ms measured/predicted per compression; the model's mean |log(predicted/measured)| last")
    errs, behind = [], []
    for name in argv:
        line, err, late = replay(Path(name))
        errs.append(err)
        behind += late
        print(f"{line}; error {err:.2f}")
    print(f"# mean error over {len(errs)} logs: {sum(errs) / len(errs):.3f}; replayed choices within 5% of the "
          f"fastest fixed format: {sum(b <= 0.05 for b in behind)} of {len(behind)}")


if __name__ == "__main__":
    main(sys.argv[1:])
