"""Auto's decisions: the fit of the measured figures, choices by bucket size, their classes,
the override, saved calibrations and the agreement order (`collective/auto.py`)."""
from __future__ import annotations

import warnings

import pytest

from horovod_q8.collective import auto as A
from horovod_q8.collective import cost
from horovod_q8.collective.cost import allreduce_time

GBIT = 1e9 / 8


def calibration(gbit: float = 1.0, alpha: float = 50e-6, ranks: int = 2, q8_fixed: float = 2e-3,
                q8_rate: float = 1e9, fp16_rate: float = 2e9, fp16_fixed: float = 2e-3) -> A.Calibration:
    """A calibration as `combine` would make it from a link of `gbit` and these codec rates; the
    q8 (fp16) path's real time at SMALL elements is its model plus `q8_fixed` (`fp16_fixed`)."""
    bw = gbit * GBIT
    cal = A.Calibration(ranks, alpha, bw, bw, (("fp16", fp16_rate, fp16_rate), ("q8", q8_rate, q8_rate)), ())
    plan = A.AutoPlan(A.Auto(), cal)
    fixed = {"none": 0.0, "fp16": fp16_fixed, "q8": q8_fixed}
    small = tuple((nm, plan.model(nm, A.SMALL) + fixed[nm]) for nm in ("none", "fp16", "q8"))
    large = tuple((nm, plan.model(nm, A.LARGE) + fixed[nm]) for nm in ("none", "fp16", "q8"))
    return A.Calibration(ranks, alpha, bw, bw, cal.rates, small, large)


def test_small_buckets_stay_plain_large_ones_compressed_on_a_slow_link():
    plan = A.AutoPlan(A.Auto(), calibration(gbit=1.0))
    assert plan.choose(2000).name == "none"  # the q8 path's fixed cost outweighs the bytes saved
    assert plan.choose(1 << 22).name == "q8"
    classes = plan.classes()
    assert [(c.name, c.reason) for _, _, c in classes] == [
        ("none", "fewer than min_size=1024 elements"), ("none", "least predicted time"),
        ("none", "within 5% of the least predicted time"), ("q8", "least predicted time")], classes
    assert classes[0][:2] == (1, 1023) and classes[1][0] == 1024
    assert all(a[1] + 1 == b[0] for a, b in zip(classes, classes[1:]))
    (_, last_none, _), (first_q8, _, _) = classes[2:]
    assert first_q8 == last_none + 1
    assert plan.choose(last_none).name == "none" and plan.choose(first_q8).name == "q8"
    for n in (1024, 5000, 65536, 1 << 20, 1 << 24):  # the choice is the least prediction
        ch = plan.choose(n)
        assert ch.name == min(ch.predicted, key=lambda kv: kv[1])[0]


def test_a_fast_link_with_a_slow_codec_sends_everything_uncompressed():
    plan = A.AutoPlan(A.Auto(), calibration(gbit=100.0, q8_rate=2e8, fp16_rate=5e8))
    assert {c.name for _, _, c in plan.classes()} == {"none"}


def test_below_min_size_never_compressed_and_allow_limits_the_choice():
    plan = A.AutoPlan(A.Auto(min_size=1 << 16), calibration(gbit=0.1, q8_fixed=0.0, fp16_fixed=0.0))
    assert plan.choose(1 << 15).name == "none"
    assert plan.choose(1 << 16).name == "q8"
    only = A.AutoPlan(A.Auto(allow=("none", "fp16")), calibration(gbit=0.1, fp16_fixed=0.0))
    assert only.choose(1 << 22).name == "fp16"


def test_predictions_are_the_cost_model_through_each_paths_two_measured_points():
    cal = calibration(gbit=1.0, q8_fixed=3e-3)
    plan = A.AutoPlan(A.Auto(), cal)
    model = allreduce_time("q8", 1 << 20, 2, alpha=cal.alpha, bandwidth=cal.bandwidth, encode_rate=1e9,
                           decode_rate=1e9)["total"]
    assert plan.predict("q8", 1 << 20) == pytest.approx(model + 3e-3, rel=1e-9)
    assert plan.fit("none") == pytest.approx((0.0, 1.0), abs=1e-9)
    # a path twice as slow per element as its model (Horovod's fp16 sum on a CPU): k = 2, and the
    # prediction passes through both measured points
    slow = dict(cal.large)
    slow["fp16"] = 2 * slow["fp16"] - dict(cal.small)["fp16"]
    plan = A.AutoPlan(A.Auto(), A.Calibration(cal.ranks, cal.alpha, cal.bandwidth, cal.gather_bandwidth, cal.rates,
                                              cal.small, tuple(slow.items())))
    assert plan.fit("fp16")[1] == pytest.approx(2.0, rel=1e-9)
    assert plan.predict("fp16", A.SMALL) == pytest.approx(dict(cal.small)["fp16"], rel=1e-9)
    assert plan.predict("fp16", A.LARGE) == pytest.approx(slow["fp16"], rel=1e-9)


def test_combine_recovers_the_link_and_takes_the_slowest_rank():
    alpha, bw, p = 40e-6, 1.25e8, 3
    def ring(n):
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * 4 * n / bw
    fast = {"small": {"none": ring(A.SMALL), "q8": 0.001}, "large": {"none": ring(A.LARGE), "q8": 0.01},
            "gather_small": 0.004 + (p - 1) * A.SMALL / bw, "gather": 0.004 + (p - 1) * A.LARGE / bw,
            "rates": [["q8", 2e9, 3e9, 5e9]], "seconds": 0.2}
    slow = dict(fast, rates=[["q8", 1e9, 4e9, 6e9]], small={"none": ring(A.SMALL), "q8": 0.002}, seconds=0.3,
                large={"none": ring(A.LARGE), "q8": 0.02})
    cal = A.combine([fast, slow], p)
    assert cal.alpha == pytest.approx(alpha, rel=1e-6)
    assert cal.bandwidth == pytest.approx(bw, rel=1e-6)
    assert cal.gather_bandwidth == pytest.approx(bw, rel=1e-6)  # the slope: a call's fixed 4 ms is not wire
    assert cal.rate("q8") == (1e9, 3e9, 5e9)
    assert dict(cal.small)["q8"] == 0.002 and dict(cal.large)["q8"] == 0.02 and cal.seconds == 0.3
    assert A.combine([slow, fast], p) == cal  # whatever the order, the same figures


def test_error_feedback_false_is_the_default_in_the_fingerprint():
    base = A.make_auto(("none", "q8", "twobit")).fingerprint()
    assert A.make_auto(("none", "q8", "twobit"), error_feedback=False).fingerprint() == base
    assert A.make_auto(("none", "q8", "twobit"), error_feedback=True).fingerprint() != base


def test_override_forces_every_choice_and_is_part_of_the_fingerprint(monkeypatch):
    base = A.Auto(allow=("none", "q8", "q4")).fingerprint()
    monkeypatch.setenv(A.OVERRIDE_ENV, "q4")
    assert A.Auto(allow=("none", "q8", "q4")).fingerprint() != base
    with pytest.raises(ValueError, match="HOROVOD_Q8_AUTO='q4' is not among this Auto's allow"):
        A.AutoPlan(A.Auto(), calibration())
    plan = A.AutoPlan(A.Auto(allow=("none", "fp16", "q8", "q4")),
                      A.Calibration(2, 1e-5, 1e9, 1e9, (("fp16", 1e9, 1e9), ("q8", 1e9, 1e9), ("q4", 1e9, 1e9))))
    assert [(a, c.name) for a, _, c in plan.classes()] == [(1, "none"), (1024, "q4")]
    monkeypatch.setenv(A.OVERRIDE_ENV, "q9")  # in the fingerprint as set (ranks compare it first), then refused
    assert A.Auto().fingerprint()["auto"]["override"] == "q9"
    state = A.AutoState(A.Auto())
    with pytest.raises(A.AutoSettingError, match="HOROVOD_Q8_AUTO='q9' is not a format"):
        state.ensure(lambda: pytest.fail("measured before refusing"), lambda s, label: None)
    monkeypatch.setenv(A.OVERRIDE_ENV, "q4")
    with pytest.raises(A.AutoSettingError, match="is not among this Auto's allow"):
        A.AutoState(A.Auto(allow=("none", "q8"))).ensure(lambda: pytest.fail("measured before refusing"),
                                                         lambda s, label: None)
    assert A.AutoSettingError.ag_pass_through  # raised as itself from inside tf.function


@pytest.mark.parametrize("allow,match", [("q8", "non-empty list"), ((), "non-empty list"),
                                         (("none", "q7"), "unknown format"), (("q8", "q8"), "twice")])
def test_bad_allow_is_refused(allow, match):
    with pytest.raises(ValueError, match=match):
        A.Auto(allow=allow)


class Measured(Exception):
    """The plan went on to measure the link."""


def unmeasured_probe(ranks: int = 2, rank: int = 0, others=None) -> A.Probe:
    """This rank's Probe among `ranks`, the others offering `others` to gather; sending raises
    Measured, so a plan made from a saved calibration shows it measured nothing."""
    def measured(*_):
        raise Measured()

    def gather(obj):
        return [obj if r == rank else others for r in range(ranks)]

    return A.Probe(ranks, measured, measured, gather)


def test_saved_calibration_gives_the_same_plan_without_measuring():
    cal = calibration(gbit=1.0)
    state = A.AutoState(A.Auto())
    statements = []
    state.loaded = cal
    plan = state.ensure(lambda: unmeasured_probe(), lambda s, label: statements.append((label, s)))
    assert [label for label, _ in statements] == ["auto.start", "auto.plan"]
    assert plan.calibration == cal and plan.restored
    saved = state.state_dict()
    resumed = A.AutoState(A.Auto())
    resumed.load_state_dict(saved)
    again = resumed.ensure(lambda: unmeasured_probe(), lambda s, label: None)
    assert again.fingerprint() == plan.fingerprint()
    other, lines = A.AutoState(A.Auto(allow=("none", "q8"))), []
    other.load_state_dict(saved)  # made for other formats: measured again, and said
    assert other.loaded is None
    with pytest.raises(Measured):
        other.ensure(lambda: unmeasured_probe(), lambda s, label: None, lines.append)
    assert lines and "the checkpoint's calibration was made for allow=" in lines[0] and "measuring again" in lines[0]
    with pytest.raises(ValueError, match="not a saved calibration"):
        resumed.load_state_dict({"calibration": {"ranks": 2}})


def test_every_rank_takes_rank_0s_saved_calibration():
    """Horovod's resume restores on rank 0 and broadcasts: rank 1, holding none, plans from rank
    0's calibration without measuring; where rank 0 holds none, every rank measures."""
    cal = calibration(gbit=1.0)
    rank1 = A.AutoState(A.Auto())
    plan = rank1.ensure(lambda: unmeasured_probe(rank=1, others=cal.to_dict()), lambda s, label: None)
    assert plan.calibration == cal and plan.restored
    rank1_with_own = A.AutoState(A.Auto())
    rank1_with_own.loaded = cal
    with pytest.raises(Measured):  # rank 0 offered none: everyone measures, rank 1's own is not used
        rank1_with_own.ensure(lambda: unmeasured_probe(rank=1, others=None), lambda s, label: None)


def test_a_calibration_saved_on_other_ranks_is_measured_again():
    cal = calibration(gbit=1.0)  # measured on 2 ranks
    state, lines = A.AutoState(A.Auto()), []
    state.loaded = cal
    with pytest.raises(Measured):
        state.ensure(lambda: unmeasured_probe(ranks=3), lambda s, label: None, lines.append)
    assert lines == ["horovod_q8 Auto: the saved calibration was measured on 2 ranks, this run has 3: measuring again"]


def test_recalibrate_measures_again(monkeypatch):
    figures = {"small": {"none": 1e-4, "fp16": 1e-4, "q8": 1e-3}, "large": {"none": 0.04, "fp16": 0.03, "q8": 0.02},
               "gather_small": 0.001, "gather": 0.02,
               "rates": [["fp16", 1e9, 1e9, 1e9], ["q8", 1e9, 1e9, 1e9]], "seconds": 0.1}
    calls = []

    def probe():
        calls.append(1)
        return A.Probe(2, send=None, allgather=None, gather=lambda mine: [mine, mine])  # every rank offers the same

    monkeypatch.setattr(A, "measure", lambda p, allow: figures)  # the figures, not the timing, under test
    state = A.AutoState(A.Auto())
    state.ensure(probe, lambda s, label: None)
    state.ensure(probe, lambda s, label: None)
    assert len(calls) == 1
    state.recalibrate()
    state.ensure(probe, lambda s, label: None)
    assert len(calls) == 2


def test_codec_rates_are_measured_for_every_allowed_format():
    rates = A.codec_rates(("none", "fp16", "q8", "q4"), n=1 << 14)
    assert [r[0] for r in rates] == ["fp16", "q8", "q4"]
    assert all(len(r) == 4 and min(r[1:]) > 0 for r in rates)


def test_describe_names_every_class_with_its_predictions():
    plan = A.AutoPlan(A.Auto(), calibration(gbit=1.0))
    lines = plan.describe()
    assert "1 Gbit/s" in lines[0] or "1.00 Gbit/s" in lines[0]
    assert any("-> none" in ln for ln in lines) and any("-> q8" in ln for ln in lines)
    assert all("fp16" in ln for ln in lines[1:])


def test_choices_by_link_meet_and_move_from_compressed_to_plain_as_the_link_speeds_up():
    ranges = A.choices_by_link((("fp16", 4e8, 4e8), ("q8", 1.5e9, 2.5e9)))
    assert ranges[0][0] == 0.0 and ranges[-1][1] == float("inf")
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert ranges[0][2] == "q8" and ranges[-1][2] == "none"


def test_codec_rates_on_the_device_run_the_cuda_kernels(cp):
    """GPU tensors: the codec is timed with the CUDA backend's arrays (a real GPU, or the host
    build of kernels/codec.cu), not NumPy's."""
    synced = []
    rates = A.codec_rates(("none", "fp16", "q8"), n=1 << 12, xp=cp, sync=lambda: synced.append(1))
    assert [r[0] for r in rates] == ["fp16", "q8"] and all(min(r[1:]) > 0 for r in rates)
    assert len(synced) == 4 * 2  # the warm-up and the timed batch of each probe (fp16; q8's encode, decode, sum)


def test_options_go_to_the_formats_they_apply_to():
    auto = A.make_auto(("none", "q8", "q4_threshold"), block_size=256, levels={"conv": 0.1, "dense": 0.2},
                       warmup_steps=3)
    hash(auto)  # a dict option is kept hashable: equal settings share one plan
    assert auto.options_for("q8") == {"block_size": 256, "warmup_steps": 3}
    assert auto.options_for("q4_threshold") == {"levels": {"conv": 0.1, "dense": 0.2}, "warmup_steps": 3}
    with pytest.raises(ValueError, match="threshold= applies to none of the formats it may choose"):
        A.make_auto(threshold=0.5)
    with pytest.raises(ValueError, match="warmup_steps= applies to none"):
        A.make_auto(("none", "fp16"), warmup_steps=2)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \[.block.\]; options: allow, block_size, "):
        A.make_auto(block=3)


def test_compression_must_be_predicted_clearly_faster_than_none():
    plan = A.AutoPlan(A.Auto(), calibration(gbit=1.0))
    n = plan.classes()[-1][0]  # the first size where q8 is the least prediction by the margin
    ch = plan.choose(n - 1)
    pred = dict(ch.predicted)
    assert ch.name == "none" and pred["none"] <= min(pred.values()) * (1 + A.MARGIN)
    assert min(pred, key=pred.get) != "none" or ch.reason == "least predicted time"
    for first, last, c in plan.classes():  # every size in a class gets that class's choice
        assert {plan.choose(m).name for m in (first, (first + last) // 2, last)} == {c.name}


def test_above_large_the_line_runs_through_the_huge_point_where_measured():
    cal = calibration(gbit=10.0)
    plan = A.AutoPlan(A.Auto(), cal)
    t_l = dict(cal.large)["fp16"]
    t_h = t_l + 3 * (plan.model("fp16", A.HUGE) - plan.model("fp16", A.LARGE))  # 3x steeper past LARGE
    huge = A.AutoPlan(A.Auto(), A.Calibration(cal.ranks, cal.alpha, cal.bandwidth, cal.gather_bandwidth, cal.rates,
                                              cal.small, cal.large, (("none", dict(cal.large)["none"] * 4),
                                                                     ("fp16", t_h))))
    assert huge.predict("fp16", A.LARGE) == pytest.approx(t_l, rel=1e-9)
    assert huge.predict("fp16", A.HUGE) == pytest.approx(t_h, rel=1e-9)
    assert huge.predict("fp16", A.LARGE // 2) == pytest.approx(plan.predict("fp16", A.LARGE // 2), rel=1e-9)
    assert huge.fit("fp16", A.HUGE)[1] == pytest.approx(3.0, rel=1e-6)
    assert A.Calibration.from_dict(huge.calibration.to_dict()) == huge.calibration


def _with_huge(cal: A.Calibration, slower: float) -> A.Calibration:
    """cal with Horovod's own paths timed at HUGE `slower` times per element than at LARGE."""
    huge = tuple((nm, t * slower * A.HUGE / A.LARGE) for nm, t in cal.large if nm in ("none", "fp16"))
    return A.Calibration(cal.ranks, cal.alpha, cal.bandwidth, cal.gather_bandwidth, cal.rates,
                         cal.small, cal.large, huge)


@pytest.mark.parametrize("text,threshold,warned", [("67108864", 64 << 20, False), (" 1024 ", 1024, False),
                                                   ("0", 0, False), ("64MB", 64, True), ("64 MiB", 64, True),
                                                   ("lots", 0, True), ("-5", 0, False), ("\uff16\uff14", 0, True)])
def test_fusion_threshold_is_read_as_horovod_reads_it(monkeypatch, text, threshold, warned):
    """Horovod takes strtol's leading integer (horovod/common/operations.cc): "64MB" is 64 bytes
    there, so here too, with a warning naming what Horovod reads."""
    monkeypatch.setenv(A.FUSION_ENV, text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert A.fusion_threshold() == threshold
        assert bool(caught) == warned, [str(w.message) for w in caught]
        if warned:
            assert f"Horovod reads {threshold} bytes" in str(caught[0].message)
        assert A.fusion_elements("none") == threshold // 4 and A.fusion_elements("fp16") == threshold // 2


def test_in_a_step_horovods_own_paths_cost_their_share_of_the_fused_message(monkeypatch):
    monkeypatch.delenv(A.FUSION_ENV, raising=False)
    # a link where a lone 16 MiB bucket goes plain, but a 64 MiB message moves at half the rate
    cal = _with_huge(calibration(gbit=10.0, q8_rate=1e9, q8_fixed=5e-3), slower=2.0)
    plan = A.AutoPlan(A.Auto(("none", "q8")), cal)
    n = 4_000_000
    alone = plan.choose(n)
    assert alone.name == "none", alone
    sizes = [n] * 6 + [1_600_000]
    step = plan.choose_step(sizes)
    assert [ch.name for ch in step[:6]] == ["q8"] * 6, step
    line = plan.describe_step(sizes)
    assert "a step of 7 buckets, 25,600,000 elements -> q8 for 7 of 7" in line  # one format, and why
    assert line.endswith(f"; {A.UNIFORM})") or A.UNIFORM in line, line
    plan = A.AutoPlan(A.Auto(), cal)  # fp16 allowed too: q8 still wins here
    assert plan.choose(n).name == "none"
    step = plan.choose_step(sizes)
    assert [ch.name for ch in step[:6]] == ["q8"] * 6, step
    fused = min(sum(sizes), A.fusion_elements("none"))
    assert dict(step[0].predicted)["none"] == pytest.approx(n / fused * plan.predict("none", fused), rel=1e-12)
    assert dict(step[0].predicted)["q8"] == plan.predict("q8", n)  # its own collective, not fused
    f16 = min(sum(sizes), A.fusion_elements("fp16"))  # fp16's casts count in full
    assert dict(step[0].predicted)["fp16"] == pytest.approx(n / f16 * plan.predict("fp16", f16), rel=1e-12)
    assert A.fusion_elements("fp16") == 2 * A.fusion_elements("none") == (128 << 20) // 2  # Horovod's default
    assert plan.choose_step([n]) == [plan.choose(n)]  # one bucket: nothing to fuse it with
    before = plan.fingerprint()
    monkeypatch.setenv(A.FUSION_ENV, "0")  # Horovod's fusion off: each bucket alone
    assert A.AutoPlan(A.Auto(), cal).fingerprint() != before  # ranks that differ here are stopped
    assert [ch.name for ch in A.AutoPlan(A.Auto(), cal).choose_step(sizes)] == [alone.name] * 6 + [
        plan.choose(1_600_000).name]


def test_probe_values_are_the_same_everywhere_and_normal():
    x = A.probe_values(3 * A.PATTERN + 5)
    assert x.dtype == "float32" and x.shape == (3 * A.PATTERN + 5,)
    assert (x == A.probe_values(x.size)).all() and (x[:A.PATTERN] == x[A.PATTERN:2 * A.PATTERN]).all()
    assert abs(float(x.std()) - 1) < 0.02 and A.probe_values(0).size == 0


def _link_probe(large_s: float, slow_small_calls: int) -> tuple:
    """A probe of one rank whose collectives sleep: `large_s` for a LARGE allreduce, 0.1 ms for a
    SMALL one except its first `slow_small_calls` (a slow spell: 30 ms each); the calls it got."""
    import time

    calls = []

    def send(name: str, n: int) -> None:
        calls.append((name, n))
        slow = sum(1 for c in calls if c == (name, A.SMALL)) <= slow_small_calls
        time.sleep(large_s if n == A.LARGE else 0.03 if slow and n == A.SMALL else 1e-4 if n == A.SMALL else 0)

    probe = A.Probe(1, send=send, allgather=lambda nbytes: calls.append(("allgather", nbytes)),
                    gather=lambda mine: [mine])
    return probe, calls


def test_a_slow_spell_in_the_small_probes_does_not_enter_the_calibration(monkeypatch):
    """On shared cores one small allreduce in two or three is slowed by the other rank: the least
    of SMALL_REPEATS timings counts, so three slowed calls (warm-up and two timed) leave it out."""
    monkeypatch.setattr(A, "codec_rates", lambda *a, **k: [])
    probe, calls = _link_probe(large_s=0.1, slow_small_calls=3)
    figures = A.measure(probe, ("none", "q8"))
    assert figures["small"]["q8"] < 0.01 and figures["small"]["none"] < 0.01
    assert calls.count(("q8", A.SMALL)) == A.SMALL_REPEATS + 1


@pytest.mark.parametrize("large_s, fast", [(0.1, False), (0.001, True)])
def test_only_a_fast_link_times_large_again_and_huge(monkeypatch, large_s, fast):
    """The second LARGE timing and the HUGE probes hang on one agreed figure (the slowest rank's
    LARGE time), so every rank makes the same calls."""
    monkeypatch.setattr(A, "codec_rates", lambda *a, **k: [])
    probe, calls = _link_probe(large_s=large_s, slow_small_calls=0)
    figures = A.measure(probe, ("none", "fp16"))
    assert calls.count(("none", A.LARGE)) == (3 if fast else 2)  # warm-up, timed, once more if fast
    assert calls.count(("allgather", A.LARGE)) == (2 + A.GATHER_AGAIN if fast else 2)  # the least of several
    assert calls.count(("allgather", A.SMALL)) == A.SMALL_REPEATS + 1
    assert bool(figures["huge"]) == fast and (("fp16", A.HUGE) in calls) == fast


def test_the_codec_is_timed_twice_and_the_faster_pass_counts(monkeypatch):
    """A slow spell of the machine over one pass of the codec probes leaves the other: the codec
    rates are measured first and again last, each figure the faster of the two."""
    passes = iter([[("q8", 1e9, 3e9, 4e9), ("fp16", 2e9, 2e9, 2e9)], [("q8", 2e9, 1e9, 5e9), ("fp16", 1e9, 1e9, 1e9)]])
    monkeypatch.setattr(A, "codec_rates", lambda *a, **k: next(passes))
    probe, _ = _link_probe(large_s=0.1, slow_small_calls=0)
    figures = A.measure(probe, ("none", "fp16", "q8"))
    assert figures["rates"] == [("q8", 2e9, 3e9, 5e9), ("fp16", 2e9, 2e9, 2e9)]


def test_a_cheap_huge_timing_counts_as_the_median_of_three(monkeypatch):
    """One 64 MiB allreduce is the noisiest probe: where it is cheap on every rank it is timed
    three times and the median counts (a slow call and a fast one leave the typical one)."""
    import time

    monkeypatch.setattr(A, "codec_rates", lambda *a, **k: [])
    # none: a warm-up, then 2, 20 and 1 ms; fp16 (not warmed) 200 ms, dearer than a repeat is worth
    huge_s = {"none": [0.0, 0.002, 0.02, 0.001], "fp16": [0.2]}
    calls = []

    def send(name: str, n: int) -> None:
        if n == A.HUGE:
            time.sleep(huge_s[name][calls.count((name, n))])
        calls.append((name, n))

    probe = A.Probe(1, send=send, allgather=lambda nbytes: None, gather=lambda mine: [mine])
    figures = A.measure(probe, ("none", "fp16"))
    assert calls.count(("none", A.HUGE)) == 4 and calls.count(("fp16", A.HUGE)) == 1  # none: warm-up + 3
    assert 0.002 <= figures["huge"]["none"] < 0.015 and figures["huge"]["fp16"] >= 0.2


def test_where_the_frontend_fuses_huge_is_timed_as_one_fused_message(monkeypatch):
    """Horovod fuses a step's none and fp16 tensors (its fusion buffer's copies included): a
    frontend that leaves them to it times HUGE as a grouped allreduce, the other sizes alone."""
    monkeypatch.setattr(A, "codec_rates", lambda *a, **k: [])
    probe, calls = _link_probe(large_s=0.001, slow_small_calls=0)
    fused = A.Probe(1, probe.send, probe.allgather, probe.gather,
                    send_fused=lambda name, n: calls.append(("fused", name, n)))
    figures = A.measure(fused, ("none", "fp16"))
    assert ("none", A.HUGE) not in calls and ("fp16", A.HUGE) not in calls
    assert ("fused", "none", A.HUGE) in calls and ("fused", "fp16", A.HUGE) in calls
    assert ("none", A.LARGE) in calls and set(figures["huge"]) == {"none", "fp16"}
    assert A.HUGE % A.FUSED_PARTS == 0


def test_a_traced_frontend_times_only_horovods_own_paths_at_small(monkeypatch):
    """TensorFlow steps run the compressed path traced: its fixed cost is that of its two
    collectives (Horovod's allreduce of the control tensor and the allgather of the codes), not
    an eager call's; the ranks start the codec probes together, as a step's codecs run."""
    order = []
    monkeypatch.setattr(A, "codec_rates", lambda *a, **k: k["together"]() or order.append("codec") or [])
    probe, calls = _link_probe(large_s=0.1, slow_small_calls=0)
    traced = A.Probe(1, probe.send, probe.allgather, lambda mine: order.append(("gather", mine)) or [mine],
                     traced=True)
    figures = A.measure(traced, ("none", "fp16", "q8"))
    assert ("q8", A.SMALL) not in calls and ("fp16", A.SMALL) in calls
    assert figures["small"]["q8"] == figures["small"]["none"] + figures["gather_small"]
    assert order[:2] == [("gather", None), "codec"]
    eager = A.measure(probe, ("none", "q8"))  # torch's hook runs eagerly: the path itself is timed
    assert ("q8", A.SMALL) in calls and eager["small"]["q8"] != eager["small"]["none"] + eager["gather_small"]


def test_in_a_step_a_quantized_bucket_costs_what_it_costs_alone():
    """The fused path encodes a bucket's members in place and splits its sum without copies
    (collective.bucket_parts): no copy term; a calibration saved with a copy rate still loads."""
    plan = A.AutoPlan(A.Auto(), calibration(gbit=10.0))
    n = 3_000_000
    assert plan.predict("q8", n, step=8 * n) == plan.predict("q8", n)
    saved = plan.calibration.to_dict()
    assert "copy_rate" not in saved
    saved["copy_rate"] = 4e9  # an older checkpoint's
    assert A.Calibration.from_dict(saved) == plan.calibration


def test_auto_replay_reads_a_bench_auto_log():
    """scripts/auto_replay.py replays a logged cell against the model in the tree."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    logs = sorted((root / "docs" / "runs" / "auto" / "2026-12-05-9f0d90d").glob("1gbit_*.log"))
    out = subprocess.run([sys.executable, str(root / "scripts" / "auto_replay.py"), *map(str, logs)],
                         capture_output=True, text=True, check=True).stdout
    assert len(logs) == 2 and out.count("chose q8") >= 2 and "mean error over 2 logs" in out, out


def test_codec_probes_wait_for_every_rank_before_each_timed_call():
    """`before` (the probe's barrier) runs ahead of each timed call, untimed, not before the
    warm-up: ranks that share cores then run each timed codec call at once."""
    import time

    events = []
    t = A._best(lambda: events.append("call"), repeats=2, before=lambda: events.append("barrier") or time.sleep(0.05))
    assert events == ["call", "barrier", "call", "barrier", "call"] and t < 0.04
    seen = []
    rates = A.codec_rates(("none", "q8"), n=1 << 16, together=lambda: seen.append(1))
    assert [r[0] for r in rates] == ["q8"] and len(seen) == 3  # one timing (a batch) per probe: encode, decode, sum
    calls = []
    A.codec_rates(("fp16",), fp16_roundtrip=calls.append, n=8, together=lambda: calls.append("barrier"))
    assert calls == [8, "barrier"] + [8] * A.PROBE_BATCH  # warm-up, then the batch after the barrier


def test_the_ranks_sum_costs_its_measured_rate_per_part_element():
    """The q-formats' sum of P parts is timed as one (a fused pass costs less than P decodes):
    the model charges every part's elements at the sum's rate, a saved calibration without one
    (three figures per format) charges them as decodes, and the speedup model is unchanged."""
    n, kw = 1 << 22, dict(alpha=1e-4, bandwidth=1e9, encode_rate=1e9, decode_rate=2e9)
    plain = cost.allreduce_time("q8", n, 2, **kw)
    assert cost.allreduce_time("q8", n, 2, sum_rate=2e9, **kw)["codec"] == pytest.approx(plain["codec"])
    fused = cost.allreduce_time("q8", n, 2, sum_rate=4e9, **kw)  # allgather: 2n summed, no plain decode
    assert plain["codec"] - fused["codec"] == pytest.approx(2 * n / 2e9 - 2 * n / 4e9)
    four = cost.allreduce_time("q8", n, 4, sum_rate=4e9, **kw)  # two-phase: 4 parts of a chunk, then n decoded
    chunk = -(-n // 4)
    assert four["codec"] == pytest.approx((n + chunk) / 1e9 + 4 * chunk / 4e9 + n / 2e9, rel=1e-3)
    old = A.Calibration.from_dict({"ranks": 2, "alpha": 1e-4, "bandwidth": 1e9, "gather_bandwidth": 1e9,
                                   "rates": [["q8", 1e9, 2e9]], "small": [], "large": []})
    assert old.rate("q8") == (1e9, 2e9, 2e9)
    assert A.AutoPlan(A.Auto(), old).model("q8", n) == pytest.approx(plain["total"])
    with pytest.raises(ValueError, match="not a saved calibration"):
        A.Calibration.from_dict({**old.to_dict(), "rates": [["q8", 1e9]]})


def test_a_step_sends_one_format_unless_mixing_is_predicted_clearly_faster():
    """The model prices each path apart, and a step runs them at once: a step whose buckets
    would mix formats sends the one format predicted cheapest for all of them, unless mixing
    is predicted MARGIN faster; buckets under min_size stay plain either way."""
    plan = A.AutoPlan(A.Auto(), calibration(gbit=1.0))
    big, small = 1 << 22, 40_000
    sizes = [big] * 6 + [small, 100]
    step_n = sum(sizes)
    assert plan.choose(big, step_n).name == "q8" and plan.choose(small, step_n).name == "fp16"  # priced apart
    step = plan.choose_step(sizes)
    assert [ch.name for ch in step] == ["q8"] * 7 + ["none"], step
    assert step[6].reason == A.UNIFORM and step[-1].reason.startswith("fewer than min_size")
    pred = [dict(ch.predicted) for ch in step[:7]]
    mixed = sum(p["q8"] for p in pred[:6]) + pred[6]["fp16"]
    assert mixed * (1 + A.MARGIN) > sum(p["q8"] for p in pred)  # mixing not predicted 5% faster
    # twenty small buckets beside one large: mixing saves far more than MARGIN and stays
    sizes = [big] + [2000] * 20
    step = plan.choose_step(sizes)
    assert [ch.name for ch in step] == ["q8"] + ["fp16"] * 20, step
    assert all(ch.reason != A.UNIFORM for ch in step)
    assert plan.choose_step(sizes) == step  # deterministic: every rank builds the same step


def test_the_logs_say_why_forced_and_under_min_size(monkeypatch):
    """A step forced by HOROVOD_Q8_AUTO says so; a bucket under min_size with none not allowed
    is said to go uncompressed (as the chosen format sends it), not as that format."""
    cal = calibration(gbit=1.0)
    monkeypatch.setenv(A.OVERRIDE_ENV, "q8")
    assert "HOROVOD_Q8_AUTO=q8" in A.AutoPlan(A.Auto(), cal).describe_step([4_000_000])
    monkeypatch.delenv(A.OVERRIDE_ENV)
    small = A.AutoPlan(A.Auto(allow=("q8",)), cal).choose(100)
    assert small.name == "q8" and "sent uncompressed" in small.reason, small
