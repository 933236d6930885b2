"""`python -m horovod_q8.bench.auto_report DIR`: the table and plot of `scripts/bench_auto.sh`'s
logs (one `horovod-q8 bench auto` log per link and kernel family, named <link>_<kernels>.log).

Per row: ms of every fixed compression and of Auto (medians over rounds), what Auto chose, Auto
against the fastest fixed choice it was allowed and against none (the median of the ratios within
a round), and whether the targets hold (within 5% of the fastest allowed, never more than 5%
slower than none)."""
from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path
from typing import Dict, List, Optional

from horovod_q8.bench.common import markdown

LINKS = {"loopback": "loopback (Gloo)", "1gbit": "2 hosts x 1 Gbit/s", "10gbit": "2 hosts x 10 Gbit/s",
         "none": "2 hosts, unshaped"}
ORDER = ["loopback", "1gbit", "10gbit", "none"]
TOLERANCE = 0.05


def parse(text: str) -> Dict[str, object]:
    """One log -> {"allow": [...], "calibration_ms": float, "kernels": str, "tables": [...],
    "calibration": the Calibration's dict, "buckets": ResNet-50's bucket sizes} (the last two
    None in logs from before ffa6e92). horovodrun's "[0]<stdout>:" prefixes are dropped, other
    ranks' lines too."""
    lines = []
    for line in text.splitlines():
        m = re.match(r"\[(\d+)\]<std(?:out|err)>:", line)
        if m and m.group(1) != "0":
            continue
        lines.append(line[m.end():] if m else line)
    text = "\n".join(lines)
    out: Dict[str, object] = {"tables": []}
    m = re.search(r"Auto may choose (\[.*?\]); calibration took (\d+) ms", text)
    if not m:
        raise ValueError("not a `horovod-q8 bench auto` log (no calibration line)")
    out["allow"], out["calibration_ms"] = ast.literal_eval(m.group(1)), float(m.group(2))
    again = re.search(r"measured again once warm: (\d+) ms", text)
    out["recalibration_ms"] = float(again.group(1)) if again else None
    opened = re.search(r"after the paths' first use \((\d+) ms", text)
    out["first_use_ms"] = float(opened.group(1)) if opened else None
    k = re.search(r"codec kernels: (.*)", text)
    out["kernels"] = k.group(1).strip() if k else "?"
    cal = re.search(r"^calibration: (\{.*\})$", text, re.M)
    out["calibration"] = json.loads(cal.group(1)) if cal else None
    buckets = re.search(r"^ResNet-50 buckets \(elements\): (\[.*\])$", text, re.M)
    out["buckets"] = json.loads(buckets.group(1)) if buckets else None
    for block in text.split("\n## ")[1:]:
        title = block.splitlines()[0].strip()
        chose = re.search(r"Auto chose: (.*)", block)
        ms = {r[0]: float(r[1]) for r in re.findall(r"^\| (\w+) \| ([0-9.]+) \|", block, re.M)}
        ratios = {r[0]: float(r[1]) for r in re.findall(r"^\| auto vs (\w+)[^|]*\| ([0-9.]+) \|", block, re.M)}
        out["tables"].append({"title": title, "chose": chose.group(1) if chose else "?", "ms": ms,
                              "ratios": ratios})
    return out


def rows(logs: Dict[str, Dict[str, object]], fixed: List[str]) -> List[List[object]]:
    table = []
    for name in sorted(logs, key=lambda n: (n.split("_", 1)[1], ORDER.index(n.split("_", 1)[0])
                                            if n.split("_", 1)[0] in ORDER else 9)):
        log = logs[name]
        link, kernels = name.split("_", 1)
        for t in log["tables"]:
            ms, allow = t["ms"], log["allow"]
            best = min((a for a in allow if a in ms), key=ms.get)
            # the bench's median over rounds of each round's ratio, where it printed one
            vs_best = 1 / t["ratios"][best] - 1 if best in t["ratios"] else ms["auto"] / ms[best] - 1
            vs_none = 1 / t["ratios"]["none"] - 1 if "none" in t["ratios"] else ms["auto"] / ms["none"] - 1
            ok = vs_best <= TOLERANCE and not vs_none > TOLERANCE
            workload = "ResNet-50" if t["title"].startswith("ResNet") else "one tensor"
            table.append([LINKS.get(link, link), kernels, workload, *[ms.get(f, "") for f in fixed], ms["auto"],
                          t["chose"], f"{best} {vs_best * 100:+.1f}%", f"{vs_none * 100:+.1f}%",
                          " / ".join(f"{log[k]:.0f}" for k in ("first_use_ms", "calibration_ms", "recalibration_ms")
                                     if log.get(k) is not None),
                          "yes" if ok else "NO"])
    return table


def plot(table: List[List[object]], fixed: List[str], path: Path, source: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = fixed + ["auto"]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(table)), 4.5))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        ys = []
        for r in table:
            ms = dict(zip(names, r[3:3 + len(names)]))
            base = ms[r[-4].split()[0]]  # the fastest fixed choice Auto was allowed
            ys.append(ms[name] / base if isinstance(ms[name], float) else 0)
        ax.bar([i + j * width for i in range(len(table))], ys, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(table))])
    ax.set_xticklabels([f"{r[0]}\n{r[1]}, {r[2]}" for r in table], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("time / fastest allowed fixed choice")
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set_ylim(0, 3.5)
    ax.legend(ncol=len(names), fontsize=8)
    ax.set_title(f"Auto against every fixed compression, 2 ranks (scripts/bench_auto.sh, {source})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[list] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m horovod_q8.bench.auto_report", description=__doc__)
    p.add_argument("logs", nargs="+", help="folders of <link>_<kernels>.log files (a later folder's cells "
                                           "replace an earlier one's)")
    p.add_argument("--fixed", default="none,fp16,q8,q4")
    p.add_argument("--markdown", default=None, help="also write the table here")
    p.add_argument("--plot", default=None, help="a PNG of every row")
    args = p.parse_args(argv)
    fixed = args.fixed.split(",")
    logs = {}
    for folder in args.logs:
        logs.update({f.stem: parse(f.read_text()) for f in sorted(Path(folder).glob("*.log"))})
    table = rows(logs, fixed)
    text = markdown(["link", "kernels", "workload", *[f"{f} ms" for f in fixed], "auto ms", "Auto chose",
                     "auto vs fastest allowed", "auto vs none", "ms: paths' first use / calibration / again warm", "targets"], table)
    print(text)
    names = [Path(f).resolve().name for f in args.logs]  # <date>-<commit>, as bench_auto.sh names a folder
    source = " + ".join(names)
    if args.markdown:
        where = " and ".join(f"docs/runs/auto/{name}/" for name in names)
        Path(args.markdown).write_text(f"`bash scripts/bench_auto.sh`, logs in {where}\n\n{text}\n")
    if args.plot:
        plot(table, fixed, Path(args.plot), source)


if __name__ == "__main__":
    main()
