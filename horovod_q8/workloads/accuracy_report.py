"""`horovod-q8 report`: mean and spread of test accuracy per compression over seeds, from the
JSON summaries that `horovod-q8 compare --out DIR` writes (DIR/NAME.json): one compare run in
DIR, or one per seed in DIR/seed*/ (`compare --seed S --out DIR/seedS`); and a plot."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="horovod-q8 report", description=__doc__)
    p.add_argument("runs", help="folder holding <compression>.json (one compare --out) or seed*/<compression>.json")
    p.add_argument("--plot", default=None, help="PNG of test accuracy per epoch per compression")
    p.add_argument("--title", default=None, help="plot title (default: dataset, ranks, seeds)")
    p.add_argument("--key", default="compression",
                   help="summary field that names a row (activation_compression for hybrid runs)")
    p.add_argument("--per-seed", action="store_true", help="a column with every seed's accuracy")
    return p


def load(runs: Path, key: str = "compression") -> Dict[str, List[dict]]:
    """The summaries under `runs` by their `key`: seed*/*.json where there are any, else *.json."""
    by_name: Dict[str, List[dict]] = {}
    files = sorted(runs.glob("seed*/*.json")) or sorted(runs.glob("*.json"))
    for f in files:
        r = json.loads(f.read_text())
        if isinstance(r, dict) and key in r and "test_accuracy" in r:  # a training's summary, not other JSON
            by_name.setdefault(r[key], []).append(r)
    if not by_name:
        raise SystemExit(f"no training summaries (<compression>.json with {key!r} and 'test_accuracy') in {runs} "
                         "or its seed*/ folders: give the folder `horovod-q8 compare --out` wrote")
    return by_name


def table(by_name: Dict[str, List[dict]], per_seed: bool = False) -> str:
    from horovod_q8.bench.common import markdown

    base = np.mean([r["test_accuracy"] for r in by_name.get("none", [])]) if "none" in by_name else None
    rows = []
    for name, rs in by_name.items():
        acc = 100 * np.array([r["test_accuracy"] for r in rs])
        delta = f"{acc.mean() - 100 * base:+.2f}" if base is not None else ""
        rows.append([name, len(rs), f"{acc.mean():.2f}", f"{acc.std(ddof=1) if len(rs) > 1 else 0:.2f}",
                     f"{acc.min():.2f}", f"{acc.max():.2f}", delta,
                     f"{np.mean([r['bytes_per_step'] for r in rs]) / 1e3:.1f}"])
        if per_seed:
            rows[-1].append(", ".join(f"{a:.2f}" for a in acc))
    return markdown(["compression", "seeds", "mean test acc %", "std", "min", "max",
                     "vs fp32 (points)", "kB sent/rank/step"] + (["per seed"] if per_seed else []), rows)


def plot(by_name: Dict[str, List[dict]], path: str, title: Optional[str] = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rs in by_name.items():
        curves = np.array([r["val_accuracy_per_epoch"] for r in rs]) * 100
        epochs = np.arange(1, curves.shape[1] + 1)
        ax.errorbar(epochs, curves.mean(0), yerr=curves.std(0), marker="o", capsize=3, label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy % (mean ± std over seeds)")
    ax.set_xticks(epochs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    seeds = max(len(v) for v in by_name.values())
    ax.set_title(title or f"{rs[0]['dataset']}, {rs[0]['ranks']} Horovod ranks, {seeds} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> None:
    by_name = load(Path(args.runs), args.key)
    print(table(by_name, args.per_seed))
    if args.plot:
        plot(by_name, args.plot, args.title)
        print(f"\nplot: {args.plot}")


def main(argv=None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
