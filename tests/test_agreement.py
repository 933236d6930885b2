"""collective.agreement: statements, their comparison, the timeout setting (the multi-rank
behaviour runs under real launchers: test_parallel, test_torch_horovod, test_torch_ddp)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from horovod_q8.collective import agreement as A
from horovod_q8.collective.setting import Setting
from horovod_q8.formats import get


class NoneCompressor:  # the class names Horovod gives its own compressors
    pass


def test_statements_name_what_each_rank_does():
    q8 = Setting(get("q8"))
    assert A.describe(q8) == q8.fingerprint()
    assert A.describe(NoneCompressor) == "none" and A.describe(NoneCompressor()) == "none"
    assert A.describe(object()) == "builtins.object"


def test_a_difference_is_named_on_the_rank_that_sees_it():
    a, b = {"compression": Setting(get("q8")).fingerprint()}, {"compression": "none"}
    A.check_same(a, [a, a], 0)
    with pytest.raises(A.ConfigMismatchError, match="rank 1 and rank 0 .* compression='none' here vs horovod_q8 'q8'"):
        A.check_same(b, [a, b], 1)
    c = {"compression": Setting(get("q8", block_size=256)).fingerprint()}
    with pytest.raises(A.ConfigMismatchError, match="block_size=1024 here vs 256 there"):
        A.check_same(a, [a, c], 0)


def test_error_feedback_is_compared_as_it_takes_effect():
    """None means off for codebook formats, and threshold formats keep their residual whatever
    it says: ranks that spell the same setting two ways agree, ranks that differ in it do not."""
    fp = {fb: {"compression": Setting(get("q8"), error_feedback=fb).fingerprint()} for fb in (None, False, True)}
    A.check_same(fp[None], [fp[None], fp[False]], 0)
    with pytest.raises(A.ConfigMismatchError, match="error_feedback=False here vs True there"):
        A.check_same(fp[None], [fp[None], fp[True]], 0)
    twobit = {fb: {"compression": Setting(get("twobit"), error_feedback=fb).fingerprint()} for fb in (None, False, True)}
    A.check_same(twobit[None], [twobit[None], twobit[True], twobit[False]], 0)


def test_other_gradients_under_the_same_settings_are_named_as_such():
    from horovod_q8.collective import policy
    q8 = Setting(get("q8")).fingerprint()
    a = {"compression": q8, "gradients": policy.gradients_statement(["w float32 (3,)", "None"])}
    b = {"compression": q8, "gradients": policy.gradients_statement(["w float32 (3,)", "v float32 (3,)"])}
    with pytest.raises(A.ConfigMismatchError, match="reduce different gradients: gradients='2 gradients, 1 of them "
                                                    "None .*same variables in the same order"):
        A.check_same(a, [a, b], 0)
    c = dict(b, compression=Setting(get("q4")).fingerprint())
    with pytest.raises(A.ConfigMismatchError, match="different compression settings"):  # settings first
        A.check_same(a, [a, c], 0)


def test_agreements_are_numbered_per_label_and_once_is_once():
    names = []

    def gather(obj, name):
        names.append(name)
        return [obj, obj]

    ag = A.Agreements()
    ag.agree(gather, 0, {"c": 1}, "opt")
    ag.agree(gather, 0, {"c": 1}, "opt")
    ag.once(gather, 0, {"c": "none"}, "allreduce")
    ag.once(gather, 0, {"c": "none"}, "allreduce")
    ag.once(gather, 0, {"c": "q8"}, "allreduce")
    assert names == ["horovod_q8.agree.opt.1", "horovod_q8.agree.opt.2", "horovod_q8.agree.allreduce.1",
                     "horovod_q8.agree.allreduce.2"]


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_timeout_is_refused(monkeypatch, value):
    monkeypatch.setenv(A.TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=A.TIMEOUT_ENV):
        A.timeout_s()


def test_the_watchdog_ends_a_process_with_a_sentence():
    code = ("import time\nfrom horovod_q8.collective.agreement import watchdog\n"
            "with watchdog(0.5, 3, 'the test'):\n    time.sleep(30)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "horovod_q8: rank 3 waited 0.5 s for every rank at the test" in proc.stderr
