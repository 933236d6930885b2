"""Every format and compressor option is checked when it is built (issue 15): values that
cannot work, and options that would silently do nothing, are refused with a clear message."""
from __future__ import annotations

import math
import types
from fractions import Fraction

import pytest

from horovod_q8 import options
from horovod_q8.collective.plan import ALLGATHER, TWO_PHASE
from horovod_q8.collective.setting import check_compressor
from horovod_q8.options import SCHEDULES
from horovod_q8.formats import Format, get, names

INF, NAN = float("inf"), float("nan")


# --- thresholds and levels ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["twobit", "q4_threshold"])
@pytest.mark.parametrize("threshold", [INF, -INF, NAN, 0, 0.0, -1, True, "0.5"])
def test_thresholds_that_cannot_work_are_refused(name, threshold):
    with pytest.raises(ValueError, match=rf"{name}: threshold must be a finite number > 0, got"):
        get(name, threshold=threshold)


@pytest.mark.parametrize("top", [0, -0.01, INF, NAN, True])
def test_q4_threshold_group_levels_must_be_positive_and_finite(top):
    with pytest.raises(ValueError, match=r"levels\['conv'\] must be a finite number > 0"):
        get("q4_threshold", levels={"conv": top})


@pytest.mark.parametrize("name", ["twobit", "q4_threshold"])
@pytest.mark.parametrize("threshold", [1e-46, 1e39])
def test_thresholds_that_vanish_or_overflow_in_float32_are_refused(name, threshold):
    """Finite in float64 but 0 or inf for the float32 kernels: nothing could be sent."""
    with pytest.raises(ValueError, match="finite, positive, increasing numbers"):
        get(name, threshold=threshold)


def test_levels_must_be_a_dict_of_known_groups():
    with pytest.raises(ValueError, match="levels must be a dict"):
        get("q4_threshold", levels=[("conv", 0.1)])
    with pytest.raises(ValueError, match="groups"):
        get("q4_threshold", levels={"lstm": 0.1})


def test_good_thresholds_still_work():
    assert get("twobit", threshold=0.1).levels == (0.1,)
    fmt = get("q4_threshold", threshold=0.05, levels={"dense": 0.01})
    assert fmt.for_shape((3, 3, 1, 8)).levels[-1] == pytest.approx(0.05)
    assert fmt.for_shape((10, 10)).levels[-1] == pytest.approx(0.01)


@pytest.mark.parametrize("levels", [(0.25, 0.5), (0.0,), (-0.5,), (NAN,), (INF,), [0.5], ("0.5",),
                                    (True,), ()])
def test_twobit_format_levels_are_checked_when_built(levels):
    """twobit has room for one level; it must be a finite positive float32."""
    with pytest.raises(ValueError, match="twobit"):
        Format(name="twobit", kind="threshold", bits=2, levels=levels)


@pytest.mark.parametrize("levels", [(0.5, 0.25), (0.1, 0.1), (0.1,) * 8])
def test_q4_levels_must_increase_and_fit_in_the_codes(levels):
    with pytest.raises(ValueError, match="1 to 7 finite, positive, increasing"):
        Format(name="t", kind="threshold", bits=4, levels=levels)


def test_format_kind_and_codebook_are_checked():
    with pytest.raises(ValueError, match="kind must be one of"):
        Format(name="x", kind="codebok", bits=8, codebook="linear")
    with pytest.raises(ValueError, match="codebook must be one of"):
        Format(name="x", kind="codebook", bits=8, codebook="lnear")
    with pytest.raises(ValueError, match="has no levels"):
        Format(name="x", kind="codebook", bits=8, codebook="linear", levels=(0.5,))
    with pytest.raises(ValueError, match="needs levels"):
        Format(name="x", kind="threshold", bits=2)
    with pytest.raises(ValueError, match="bits must be 2, 4 or 8"):
        Format(name="x", kind="codebook", bits=True, codebook="linear")


# --- block size, rounding, seed -----------------------------------------------------------

@pytest.mark.parametrize("block", [-1, -5, 1.5, 64.0, True, "64"])
def test_block_size_must_be_a_non_negative_int(block):
    with pytest.raises(ValueError, match=r"q8: block_size .* must be an int >= 0, got"):
        get("q8", block_size=block)


@pytest.mark.parametrize("name,bits", [("q8", 8), ("q4", 4)])
@pytest.mark.parametrize("block", range(1, 9))
def test_block_sizes_no_cheaper_than_fp16_are_refused(name, bits, block):
    """B costs bits/8 + 4/B bytes per element; refused exactly where that is >= 2."""
    cost = Fraction(bits, 8) + Fraction(4, block)
    if cost < 2:
        assert get(name, block_size=block).block_size == block
        return
    smallest = min(b for b in range(1, 100) if Fraction(bits, 8) + Fraction(4, b) < 2)
    with pytest.raises(ValueError) as err:
        get(name, block_size=block)
    msg = str(err.value)
    assert f"{float(cost):.3g} bytes per element" in msg and f"block_size >= {smallest}" in msg


def test_whole_tensor_block_stays_allowed():
    assert get("q8", block_size=0).block_size == 0 and get("q4", block_size=0).block_size == 0


@pytest.mark.parametrize("rounding", ["up", "Nearest", 1, ("nearest",)])
def test_rounding_must_be_a_known_one(rounding):
    with pytest.raises(ValueError, match=r"rounding must be one of \('nearest', 'stochastic'\)"):
        get("q8", rounding=rounding)


@pytest.mark.parametrize("seed", [-1, 2 ** 32, 1.0, True, "3"])
def test_seed_must_be_a_32_bit_int(seed):
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        get("q8", rounding="stochastic", seed=seed)


def test_good_seeds_work_and_seed_needs_stochastic_rounding():
    assert get("q8", rounding="stochastic", seed=2 ** 32 - 1).seed == 2 ** 32 - 1
    with pytest.raises(ValueError, match="seed applies to rounding='stochastic' only"):
        get("q8", seed=3)


@pytest.mark.parametrize("name", ["twobit", "q4_threshold"])
@pytest.mark.parametrize("kw", [{"block_size": 64}, {"rounding": "stochastic"},
                                {"rounding": "stochastic", "seed": 1}])
def test_codebook_options_on_threshold_formats_are_refused(name, kw):
    with pytest.raises(ValueError, match=f"{name} is a threshold format: .* not apply"):
        get(name, **kw)


def test_options_on_a_format_object_or_a_bad_name_are_refused():
    with pytest.raises(ValueError, match=r"options \['block_size'\] apply to a format name"):
        get(get("q8"), block_size=64)
    assert get(get("q4")) == get("q4")
    with pytest.raises(ValueError, match="unknown format"):
        get(["q8"])


def test_every_registered_format_passes_its_own_checks():
    for name in names():
        fmt = get(name)
        for shape in ((10,), (4, 4), (3, 3, 2, 2)):
            assert fmt.for_shape(shape).bits == fmt.bits


# --- compressor options (framework-free) ----------------------------------------------------

BAD_COUNTS = [-1, 1.5, 1024.0, True, "1024", None]


@pytest.mark.parametrize("option", ["min_size", "warmup_steps", "pipeline_elements"])
@pytest.mark.parametrize("value", BAD_COUNTS)
def test_counts_must_be_non_negative_ints(option, value):
    with pytest.raises(ValueError, match=rf"^{option} must be an int >= 0, got {value!r} "):
        options.check_compressor_options(**{option: value})


@pytest.mark.parametrize("value", ["no", "False", 0, 1, "yes"])
def test_error_feedback_must_be_a_real_bool(value):
    """"no" is truthy: before the check it turned feedback on."""
    with pytest.raises(ValueError, match=rf"^error_feedback must be True, False or None .*got {value!r}"):
        options.check_compressor_options(error_feedback=value)


@pytest.mark.parametrize("value", ["ring", "Auto", None, 2])
def test_schedule_must_be_known(value):
    accepted = r"\('auto', 'two_phase', 'allgather'\)"
    with pytest.raises(ValueError, match=rf"^schedule must be one of {accepted}, got {value!r}"):
        options.check_compressor_options(schedule=value)


@pytest.mark.parametrize("kw", [{}, {"min_size": 0}, {"warmup_steps": 10}, {"pipeline_elements": 4096},
                                *({"error_feedback": v} for v in (None, True, False)),
                                *({"schedule": s} for s in SCHEDULES)])
def test_good_compressor_options_pass(kw):
    options.check_compressor_options(**kw)


def test_the_schedules_accepted_are_the_ones_the_plan_runs():
    assert SCHEDULES == ("auto", TWO_PHASE, ALLGATHER)


def test_check_compressor_reads_the_object_and_needs_a_format():
    comp = types.SimpleNamespace(format=get("q8"), **options.COMPRESSOR_OPTIONS)
    check_compressor(comp)
    comp.error_feedback = "no"
    with pytest.raises(ValueError, match="error_feedback"):
        check_compressor(comp)
    with pytest.raises(ValueError, match="format must be a horovod_q8.formats.Format"):
        check_compressor(types.SimpleNamespace(format="q8", **options.COMPRESSOR_OPTIONS))


def test_the_tensorflow_compressor_runs_the_checks():
    pytest.importorskip("horovod.tensorflow")
    from horovod_q8.tensorflow import compressor

    with pytest.raises(ValueError, match="error_feedback must be True, False or None"):
        compressor("twobit", error_feedback="no")
    with pytest.raises(ValueError, match="min_size must be an int"):
        compressor("q8", min_size=1.5)
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        compressor("twobit", threshold=math.inf)
    assert compressor("q8", error_feedback=False, schedule="two_phase").feedback is False


BAD_FOR_HOROVOD_OWN = [{"warmup_steps": 100}, {"schedule": "ring"}, {"block_size": 3}, {"min_size": True},
                       {"error_feedback": False}, {"threshold": INF}, {"pipeline_elements": 4096},
                       {"min_size": 1024.0}]


@pytest.mark.parametrize("name", ["none", "fp16"])
@pytest.mark.parametrize("kw", BAD_FOR_HOROVOD_OWN)
def test_options_given_to_horovods_own_compressors_are_refused_not_dropped(name, kw):
    """compressor("none"|"fp16") gives Horovod's own compressor, which none of these options
    reach: each is refused by name, the defaults written out still pass."""
    from horovod_q8.collective.setting import by_name

    with pytest.raises(ValueError, match=rf"compressor\('{name}'\) is Horovod's own {name} .*{next(iter(kw))}="):
        by_name(name, **kw)
    assert by_name(name, **{k: options.COMPRESSOR_OPTIONS[k] for k in options.COMPRESSOR_OPTIONS}) is None
    assert by_name(name, block_size=None, error_feedback=None) is None


@pytest.mark.parametrize("frontend", ["horovod_q8.tensorflow", "horovod_q8.torch"])
def test_both_frontends_refuse_options_on_horovods_own(frontend):
    pytest.importorskip("horovod.tensorflow" if frontend.endswith("tensorflow") else "horovod.torch")
    import importlib

    compressor = importlib.import_module(frontend).compressor
    for name in ("none", "fp16"):
        assert "horovod" in type(compressor(name)).__module__ or "horovod" in compressor(name).__module__
        with pytest.raises(ValueError, match="takes none of horovod_q8's options, got warmup_steps=100"):
            compressor(name, warmup_steps=100)
