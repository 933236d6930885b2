"""What ranks of one training must agree on, and epochs that hold no step: sentences, before
any collective could wait forever (the real 2-rank runs: test_training.py)."""
from __future__ import annotations

import pytest

from horovod_q8.workloads import common


def settings(*argv: str, steps: int = 10, classes: int = 10) -> dict:
    return common.run_settings(common.build_parser().parse_args(["mnist", *argv]), steps, classes)


def test_agreeing_ranks_pass_and_per_node_paths_may_differ():
    common.check_ranks_agree([settings("--data-dir", "/a", "--verbose", "0"),
                              settings("--data-dir", "/b", "--checkpoint-dir", "/c", "--results-json", "r.json")])


def test_each_difference_is_named_with_every_rank_value():
    with pytest.raises(common.RanksDisagree) as e:
        common.check_ranks_agree([settings("--epochs", "1"), settings("--epochs", "2", "--lr", "0.5"),
                                  settings("--epochs", "1", steps=9)])
    text = str(e.value)
    assert "--epochs (rank 0: 1, rank 1: 2, rank 2: 1)" in text
    assert "--lr (rank 0: None, rank 1: 0.5, rank 2: None)" in text
    assert "steps per epoch (from the data) (rank 0: 10, rank 1: 10, rank 2: 9)" in text
    assert "--data-dir" in text and "may differ" in text


def test_an_epoch_needs_one_whole_step():
    assert common.whole_steps(32, 2, 60000) == 937
    with pytest.raises(common.UserError, match="--batch-size 100000 on 2 rank.* more than the 60000 training"):
        common.whole_steps(100000, 2, 60000)
