"""`horovod-q8 bench codec` runs and reports every row; its reciprocal check counts what it claims."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

import horovod_q8 as q
from horovod_q8.backends import native
from horovod_q8.bench import codec as bench
from horovod_q8.formats import get


def test_bench_codec_writes_every_row(tmp_path, capsys):
    out = tmp_path / "codec.json"
    bench.main(["--elements", "20000", "--repeats", "1", "--threads", "1,all", "--formats", "q8,twobit",
                "--json", str(out)])
    data = json.loads(out.read_text())
    got = {(r["format"], r["variant"], r["threads"]) for r in data["rows"]}
    every = numba.config.NUMBA_NUM_THREADS
    settings = {("serial", 1), ("parallel", 1), ("parallel", every)}
    assert got == {(f, v, t) for f in ("q8", "twobit +residual", "twobit") for v, t in settings}
    for r in data["rows"]:
        assert r["encode_ms"] > 0 and r["decode_ms"] > 0 and r["copy_ms"] > 0
        assert r["ratio"] == pytest.approx((r["encode_ms"] + r["decode_ms"]) / r["copy_ms"])
        assert r["sum2_ms"] > 0 and r["ratio_sum2"] == pytest.approx(r["sum2_ms"] / r["copy_ms"])
    out = capsys.readouterr().out
    assert f"| twobit +residual | {bench.HERE} | parallel | {every} |" in out
    first = out.splitlines()[0]
    assert "kernels: " in first and ("AVX" in first or "Numba" in first), first


def test_reciprocal_check_counts_changed_quotients(rng):
    fmt = get("q8")
    x = rng.standard_normal(1 << 16).astype(np.float32)
    quotients, codes = bench.reciprocal_differences(x, fmt)
    assert quotients > 0 and 0 <= codes <= quotients
    x.reshape(-1, 1024)[:, 0] = 1.0  # every block's scale 1.0: x * (1/1) is x / 1 exactly
    x = np.clip(x, -1, 1)
    assert bench.reciprocal_differences(x, fmt) == (0, 0)


def test_bench_codec_times_a_git_baseline_in_the_same_rounds(tmp_path):
    out = tmp_path / "codec.json"
    bench.main(["--elements", "5000", "--repeats", "1", "--threads", "1", "--formats", "twobit",
                "--no-residual", "--baseline", "HEAD", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert {(r["code"], r["variant"]) for r in rows} == {(c, v) for c in ("HEAD", bench.HERE)
                                                         for v in ("serial", "parallel")}


def test_a_baseline_calls_its_own_native_kernels():
    """The revision's cpu.py imports the revision's native.py, which builds the revision's
    kernels/ sources, not this tree's."""
    _, cpu_mod, _ = bench.baseline_backend("HEAD")
    assert cpu_mod.native is not native and cpu_mod.native.__name__ == "hq8_baseline_native"
    committed = subprocess.run(["git", "show", "HEAD:kernels/codec_x86.c"], capture_output=True, text=True,
                               check=True, cwd=Path(bench.__file__).resolve().parents[2]).stdout
    assert cpu_mod.native.kernel_source("codec_x86.c") == committed
    x = np.random.default_rng(3).standard_normal(3000).astype(np.float32)
    fmt = get("q8")
    assert np.array_equal(cpu_mod.encode(x, fmt), q.quantize(x, fmt, backend="reference"))


@pytest.mark.skipif(not native.library(), reason="the AVX-512 kernels do not run on this CPU")
def test_codec_ablation_applies_every_variant():
    """scripts/codec_ablation.py builds every variant of the committed kernel (its text
    substitutions still match) and the exact ones keep the committed kernel's codes."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "codec_ablation.py"
    out = subprocess.run([sys.executable, str(script), "--elements", "5000", "--block", "1000", "--rounds", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line.rstrip(" |").rsplit(" | ", 1)[1]
            for line in out.stdout.splitlines() if line.startswith("| ") and not line.startswith("| variant")}
    assert len(rows) == 9
    assert rows["this tree's kernel"] == "True"
    for exact in ("quotients not taken ahead", "no prefetch", "x / s without a division"):
        assert rows[next(k for k in rows if k.startswith(exact))] == "True", exact


def test_codec_floor_applies_every_variant():
    """scripts/codec_floor.py builds every AVX2 variant (its text substitutions still match, where
    AVX2 runs) and the Numba ones; the shipped rows and the exact alternatives (a search, two
    decodes; a Numba search) give the shipped kernels' bytes, the timing-only rows do not, and it states the room
    left and the bound with a free search."""
    avx2 = native._load("avx2")[0] is not None
    script = Path(__file__).resolve().parents[1] / "scripts" / "codec_floor.py"
    out = subprocess.run([sys.executable, str(script), "--kernels", "avx2,numba" if avx2 else "numba",
                          "--elements", "70000", "--rounds", "2"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = {tuple(c.strip() for c in line.strip("| \n").split(" | ")[:3]): line.rstrip(" |").rsplit(" | ", 1)[1]
            for line in out.stdout.splitlines() if line.startswith("| ") and not line.startswith("| kernels")}
    assert len(rows) == (12 if avx2 else 5), out.stdout
    for (family, variant, op), same in rows.items():
        assert same == str(variant == "shipped" or "exact" in variant), (family, variant, op)
    targets = [line for line in out.stdout.splitlines() if line.startswith(("avx2: target", "numba: target"))]
    assert len(targets) == (2 if avx2 else 1), out.stdout
    assert ("avx2: with a search that cost nothing" in out.stdout) == avx2, out.stdout
