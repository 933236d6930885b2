"""`horovod-q8 speedup`: the table, the plot and the break-even bandwidths."""
from __future__ import annotations

import argparse
import json
import math
from typing import List, Sequence

from horovod_q8.speedup import layers, model as M, rates as R
from horovod_q8.speedup.network import GBIT, PRESETS, Cluster, link

DEFAULT_GPUS = tuple(2 ** k for k in range(11))  # 1 .. 1024
DEFAULT_METHODS = ("fp32", "fp16", "q8", "q4", "twobit")


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def build_parser(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default="resnet50",
                   help=f"{', '.join(layers.NAMES)}, or a .json/.csv of per-layer parameter counts")
    g.add_argument("--params", type=float, default=None, help="one tensor of N parameters instead of --model")
    g.add_argument("--compute-time", type=float, default=None,
                   help="forward + backward seconds per batch per GPU")
    g.add_argument("--throughput", type=float, default=None,
                   help="single-GPU images/s instead of --compute-time (needs --batch)")
    g.add_argument("--batch", type=int, default=None, help="per-GPU batch size (for images/s)")
    n = p.add_argument_group("network")
    n.add_argument("--network", default="25gbe", help=f"inter-node link: {', '.join(PRESETS)}, or e.g. 40gbit")
    n.add_argument("--alpha-us", type=float, default=None, help="inter-node latency per message (us)")
    n.add_argument("--intra", default="nvlink", help="link between GPUs of one node")
    n.add_argument("--intra-alpha-us", type=float, default=None)
    n.add_argument("--gpus-per-node", type=int, default=1)
    n.add_argument("--gpus", default=None, help="GPU counts (default 1,2,4,...,1024)")
    n.add_argument("--add-gpus", default="", help="GPU counts added to the list, e.g. 96")
    c = p.add_argument_group("collectives and codec")
    c.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="fp32 and --compression names")
    c.add_argument("--schedule", default="auto", choices=[s for s in M.SCHEDULES if s != M.RING],
                   help="q-formats: auto = horovod_q8's choice; hierarchical = not in horovod_q8 (what-if)")
    c.add_argument("--hierarchical", action="store_true",
                   help="fp32/fp16 through Horovod's hierarchical allreduce instead of the flat ring")
    c.add_argument("--codec", default="gpu", choices=R.PRESETS, help="codec throughput preset")
    c.add_argument("--encode-rate", type=float, default=None, help="elements/s, overrides --codec")
    c.add_argument("--decode-rate", type=float, default=None, help="elements/s, overrides --codec")
    c.add_argument("--overlap", type=float, default=M.OVERLAP,
                   help="fraction of compute time communication hides behind (default 1/3)")
    c.add_argument("--fusion-mb", type=float, default=64, help="Horovod fusion buffer (MiB)")
    o = p.add_argument_group("output")
    o.add_argument("--plot", default=None, help="PNG of speedup against GPUs")
    o.add_argument("--json", default=None, help="write every predicted row here")
    o.add_argument("--break-even-gpus", type=int, default=None, help="default: the largest GPU count")


def setup_from_args(args) -> tuple:
    if args.params:
        spec = layers.single(int(args.params))
    else:
        spec = layers.load(args.model)
    if args.compute_time:
        compute = args.compute_time
    elif args.throughput and args.batch:
        compute = args.batch / args.throughput
    else:
        raise SystemExit("give --compute-time, or --throughput with --batch")
    cluster = Cluster(link(args.network, args.alpha_us), link(args.intra, args.intra_alpha_us),
                      args.gpus_per_node)
    setup = M.Setup(cluster, compute, overlap=args.overlap, codec=args.codec,
                    encode_rate=args.encode_rate, decode_rate=args.decode_rate, schedule=args.schedule,
                    hierarchical=args.hierarchical, fusion_bytes=int(args.fusion_mb * 1024 * 1024))
    gpus = _ints(args.gpus) if args.gpus else list(DEFAULT_GPUS)
    gpus = sorted({p for p in gpus + _ints(args.add_gpus)
                   if p == 1 or p <= args.gpus_per_node or p % args.gpus_per_node == 0})
    methods = [x.strip() for x in args.methods.split(",") if x.strip()]
    for m in methods:
        M.canonical(m)
    return spec, setup, gpus, methods


def describe(spec, setup: M.Setup, batch=None) -> str:
    c = setup.cluster
    enc, dec = setup.rates("q8")
    return (f"model {spec.name}: {spec.params / 1e6:.2f}M parameters in {len(spec.sizes)} tensors "
            f"({spec.source}); compute {setup.compute_time * 1e3:.1f} ms/batch"
            + (f" of {batch}" if batch else "") + f"; {c.gpus_per_node} GPU(s)/node, inter "
            f"{c.inter.name} {c.inter.gbit:g} Gbit/s alpha {c.inter.alpha * 1e6:g} us, intra "
            f"{c.intra.name} {c.intra.gbit:g} Gbit/s; overlap {setup.overlap:.3g}; codec "
            f"{setup.codec} (q8 encode {enc:.3g}, decode {dec:.3g} el/s: {R.SOURCES[setup.codec]}); "
            f"fusion {setup.fusion_bytes / 2 ** 20:g} MiB")


def table(rows: Sequence[dict], methods: Sequence[str], batch=None) -> str:
    """Markdown: per GPU count, each method's speedup, efficiency, step time (and images/s)."""
    labels = [M.label(m) for m in methods]
    head = "| GPUs | " + " | ".join(labels) + " |"
    lines = [head, "|---" * (len(labels) + 1) + "|"]
    by = {(r["gpus"], r["method"]): r for r in rows}
    for p in sorted({r["gpus"] for r in rows}):
        cells = []
        for lab in labels:
            r = by[(p, lab)]
            cell = f"{r['speedup']:.1f}x {100 * r['efficiency']:.0f}% {r['step'] * 1e3:.0f} ms"
            if batch:
                cell += f" {r['images_per_s']:.0f} img/s"
            cells.append(cell)
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail(rows: Sequence[dict], gpus: int) -> str:
    """Where the time goes at one GPU count."""
    lines = ["| method | schedule | calls | MB sent/rank | wire ms | latency ms | codec ms | "
             "comm ms | exposed ms | step ms |", "|---" * 10 + "|"]
    for r in rows:
        if r["gpus"] == gpus:
            lines.append(f"| {r['method']} | {r['schedule']} | {r['calls']} | {r['bytes_per_rank'] / 1e6:.1f} | "
                         f"{r['wire'] * 1e3:.1f} | {r['latency'] * 1e3:.2f} | {r['codec'] * 1e3:.1f} | "
                         f"{r['comm'] * 1e3:.1f} | {r['exposed'] * 1e3:.1f} | {r['step'] * 1e3:.1f} |")
    return "\n".join(lines)


def _gbit(bw: float) -> str:
    if bw == 0:
        return "never pays"
    if math.isinf(bw):
        return "pays at every bandwidth tried (up to 80000 Gbit/s)"
    return f"{bw / GBIT:.3g} Gbit/s"


def break_evens(spec, setup: M.Setup, methods: Sequence[str], gpus: int) -> List[str]:
    out = []
    for m in methods:
        if M.canonical(m) in M.UNCOMPRESSED:
            continue
        for ref in ("fp32", "fp16"):
            bw = M.break_even(spec, gpus, m, ref, setup)
            out.append(f"break-even at {gpus} GPUs, {M.label(m)} vs {ref}: {_gbit(bw)}")
    return out


def plot(rows: Sequence[dict], methods: Sequence[str], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    gpus = sorted({r["gpus"] for r in rows})
    ax.plot(gpus, gpus, color="0.7", linestyle=":", label="linear")
    for m in methods:
        pts = sorted((r["gpus"], r["speedup"]) for r in rows if r["method"] == M.label(m))
        xs = [p for p, _ in pts]
        ax.plot(xs, [s for _, s in pts], marker="o", markersize=3, label=M.label(m))
        ax2.plot(xs, [100 * s / p for p, s in pts], marker="o", markersize=3, label=M.label(m))
    for a, ylabel in ((ax, "speedup over one GPU"), (ax2, "scaling efficiency (%)")):
        a.set_xscale("log", base=2)
        a.set_xlabel("GPUs")
        a.set_ylabel(ylabel)
        a.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args) -> None:
    spec, setup, gpus, methods = setup_from_args(args)
    rows = M.predict(spec, gpus, methods, setup, args.batch)
    print(describe(spec, setup, args.batch))
    print()
    print(table(rows, methods, args.batch))
    be_gpus = args.break_even_gpus or max(gpus)
    print()
    print(detail(rows, be_gpus) if be_gpus in gpus else "")
    print()
    if be_gpus > setup.cluster.gpus_per_node:
        for line in break_evens(spec, setup, methods, be_gpus):
            print(line)
    else:
        print(f"no break-even: {be_gpus} GPUs fit in one node, the inter-node link is unused")
    if args.plot:
        c = setup.cluster
        plot(rows, methods, args.plot, f"{spec.name}, {c.gpus_per_node}/node, {c.inter.name}, "
             f"compute {setup.compute_time * 1e3:.0f} ms, codec {setup.codec}")
        print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": describe(spec, setup, args.batch), "rows": rows}, f, indent=1)
