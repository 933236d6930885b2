"""`horovod-q8 report` reads the folder `compare --out` writes, flat or one seed*/ per seed."""
from __future__ import annotations

import json

import pytest

from horovod_q8.workloads import accuracy_report


def summary(name: str, acc: float) -> dict:
    return {"compression": name, "test_accuracy": acc, "bytes_per_step": 1000.0,
            "val_accuracy_per_epoch": [acc - 0.1, acc]}


def test_a_flat_compare_folder_and_seed_folders_both_read(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for name, acc in (("none", 0.9), ("q8", 0.89)):
        (flat / f"{name}.json").write_text(json.dumps(summary(name, acc)))
    (flat / "notes.json").write_text(json.dumps({"other": 1}))  # not a training's summary
    rows = accuracy_report.load(flat)
    assert sorted(rows) == ["none", "q8"] and len(rows["q8"]) == 1
    seeds = tmp_path / "seeds"
    for seed, acc in ((0, 0.88), (1, 0.9)):
        (seeds / f"seed{seed}").mkdir(parents=True)
        (seeds / f"seed{seed}" / "q8.json").write_text(json.dumps(summary("q8", acc)))
    rows = accuracy_report.load(seeds)
    assert len(rows["q8"]) == 2
    assert "| q8 | 2 | 89.00 |" in accuracy_report.table(rows)


def test_a_folder_without_summaries_says_what_to_give(tmp_path):
    with pytest.raises(SystemExit, match="give the folder `horovod-q8 compare --out` wrote"):
        accuracy_report.load(tmp_path)
