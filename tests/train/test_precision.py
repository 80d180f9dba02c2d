"""jformer/train/precision.py: train.compute_dtype "auto" picks bfloat16 only where the
devices compute it natively, and the run's config says which dtype it chose."""
import numpy as np
import pytest

from configs import multi30k, small
from jformer.config import ConfigError
from jformer.train import config_checks, precision

ICE_LAKE = frozenset({"avx512f", "avx512bw", "avx512_vnni", "fma"})  # no bf16
ZEN4 = ICE_LAKE | {"avx512_bf16"}
SAPPHIRE_RAPIDS = ICE_LAKE | {"avx512_bf16", "amx_tile", "amx_bf16"}
AMX_WITHOUT_BF16 = ICE_LAKE | {"amx_tile", "amx_int8"}  # tiles, but no bf16 products


@pytest.mark.parametrize("platform, flags, expected", [
    ("cpu", ICE_LAKE, "float32"),
    ("cpu", ZEN4, "bfloat16"),
    ("cpu", SAPPHIRE_RAPIDS, "bfloat16"),
    ("cpu", AMX_WITHOUT_BF16, "float32"),
    ("cpu", frozenset(), "float32"),  # flags unreadable
    ("tpu", ICE_LAKE, "bfloat16"),  # the host's CPU does not matter
])
def test_auto_is_bfloat16_only_where_it_is_native(platform, flags, expected):
    assert precision.compute_dtype("auto", platform, flags) == expected


@pytest.mark.parametrize("capability, expected", [(9.0, "bfloat16"), (8.0, "bfloat16"),
                                                  (7.5, "float32"), (7.0, "float32")])
def test_auto_on_cuda_needs_ampere(capability, expected):
    assert precision.compute_dtype("auto", "gpu", ICE_LAKE, capability) == expected


def test_auto_on_a_gpu_without_a_cuda_capability_is_bfloat16(monkeypatch):
    monkeypatch.setattr(precision, "cuda_capability", lambda: None)  # ROCm
    assert precision.compute_dtype("auto", "gpu") == "bfloat16"


def test_an_explicit_dtype_is_kept_on_every_machine():
    for name in ("float32", "bfloat16"):
        for platform, flags in (("cpu", ICE_LAKE), ("cpu", ZEN4), ("gpu", frozenset())):
            assert precision.compute_dtype(name, platform, flags) == name


def test_cpu_flags_are_the_words_of_the_native_flags_line(monkeypatch):
    line = "flags\t\t: fpu avx512f amx_bf16"
    monkeypatch.setattr(precision.native, "cpu_flags", lambda: line)
    assert precision.cpu_flags() == {"fpu", "avx512f", "amx_bf16"}
    assert precision.compute_dtype("auto", "cpu") == "bfloat16"
    monkeypatch.setattr(precision.native, "cpu_flags", lambda: "x86_64")  # no flags line
    assert precision.cpu_flags() == frozenset()
    assert precision.compute_dtype("auto", "cpu") == "float32"


@pytest.mark.parametrize("flags, expected", [(ICE_LAKE, "float32"), (ZEN4, "bfloat16")])
def test_the_validated_config_holds_the_chosen_dtype(monkeypatch, flags, expected):
    """validate_config resolves "auto" once: the model computes in the chosen dtype and
    train.compute_dtype (what config.json keeps) names it, not "auto"."""
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    monkeypatch.setattr(precision.jax, "default_backend", lambda: "cpu")
    cfg = config_checks.validate_config(multi30k.get_config())
    assert (cfg.train.compute_dtype, cfg.model.dtype) == (expected, expected)


def test_auto_with_a_bfloat16_model_dtype_on_a_float32_machine_is_refused(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: ICE_LAKE)
    monkeypatch.setattr(precision.jax, "default_backend", lambda: "cpu")
    c = small.get_config()
    c.model.dtype, c.train.compute_dtype = "bfloat16", "auto"
    with pytest.raises(ConfigError, match=r"'model.dtype' \('bfloat16'\) differs from "
                       r"'train.compute_dtype' \('float32'\)"):
        config_checks.validate_config(c)


def test_an_unknown_dtype_is_a_config_error_naming_the_choices():
    c = small.get_config()
    c.train.compute_dtype = "half"
    with pytest.raises(ConfigError, match=r"train.compute_dtype.*auto"):
        config_checks.validate_config(c)


def test_a_run_resolves_auto_once_and_leaves_other_values(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: ICE_LAKE)
    monkeypatch.setattr(precision.jax, "default_backend", lambda: "cpu")
    raw = multi30k.get_config().to_dict()
    resolved = precision.resolve_for_run(raw)
    assert resolved["train"]["compute_dtype"] == "float32"
    assert raw["train"]["compute_dtype"] == "auto"  # the caller's dict is not changed
    assert resolved["model"] == raw["model"]
    raw["train"]["compute_dtype"] = "bfloat16"
    assert precision.resolve_for_run(raw) is raw
    raw["train"]["compute_dtype"] = "float16"  # not a choice: left for the config checks
    assert precision.resolve_for_run(raw) is raw


@pytest.mark.parametrize("gathered, error", [
    ([0, 0, 0], None),
    ([1, 1], None),
    ([1, 0, 1], "process 0: bfloat16, process 1: float32, process 2: bfloat16"),
])
def test_processes_that_choose_differently_stop_the_run(monkeypatch, gathered, error):
    monkeypatch.setattr(precision.jax, "process_count", lambda: len(gathered))
    monkeypatch.setattr(precision.multihost_utils, "process_allgather",
                        lambda x: np.asarray(gathered, dtype=np.int32))
    mine = precision.DTYPES[gathered[0]]
    monkeypatch.setattr(precision, "compute_dtype", lambda name: mine)
    raw = {"train": {"compute_dtype": "auto"}}
    if error is None:
        assert precision.resolve_for_run(raw)["train"]["compute_dtype"] == mine
    else:
        with pytest.raises(ConfigError, match=error):
            precision.resolve_for_run(raw)
