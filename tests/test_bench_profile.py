"""bench/profile_decode.py (no timing): reading the compiled HLO and the trace events."""
import importlib.util
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
sys.path.insert(0, BENCH)
_spec = importlib.util.spec_from_file_location("bench_profile_decode",
                                               os.path.join(BENCH, "profile_decode.py"))
profile = importlib.util.module_from_spec(_spec)
sys.modules["bench_profile_decode"] = profile  # its dataclass looks itself up there
_spec.loader.exec_module(profile)

HLO = """HloModule m

%fused_computation (p0: f32[1,256], p1: f32[256,768]) -> f32[1,768] {
  %p0 = f32[1,256]{1,0} parameter(0)
  %p1 = f32[256,768]{1,0} parameter(1)
  ROOT %dot.3 = f32[1,768]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_computation.1 (p0: f32[1,768]) -> f32[1,768] {
  %p0 = f32[1,768]{1,0} parameter(0)
  ROOT %exponential.1 = f32[1,768]{1,0} exponential(%p0)
}

ENTRY %main (x: f32[1,256], w: f32[256,768], k: f32[4,64,32]) -> f32[1,768] {
  %x = f32[1,256]{1,0} parameter(0)
  %w = f32[256,768]{1,0} parameter(1)
  %k = f32[4,64,32]{2,1,0} parameter(2)
  %dot.7 = f32[4,1,32]{2,1,0} dot(%x, %k), lhs_batch_dims={0}
  %ynn_fusion.2 = f32[1,768]{1,0} fusion(%x, %w), kind=kCustom, calls=%fused_computation
  %exp_fusion.4 = f32[1,768]{1,0} fusion(%ynn_fusion.2), kind=kLoop, calls=%fused_computation.1
  ROOT %custom-call.5 = f32[1,768]{1,0} custom-call(%exp_fusion.4, %w), custom_call_target="jformer_int8_matmul", api_version=API_VERSION_TYPED_FFI
}
"""


def test_classify_finds_products_inside_fusions_and_names_the_rest_by_stem():
    ops = profile.classify(HLO)
    assert ops["ynn_fusion.2"] == profile.Op("matmul", "f32[1,768]", "f32,f32")
    assert ops["dot.7"] == profile.Op("matmul", "f32[4,1,32]", "f32,f32")
    assert ops["exp_fusion.4"] == profile.Op("exp_fusion", "f32[1,768]")
    assert ops["x"] == profile.Op("x", "f32[1,256]")  # a parameter: never in a trace
    # jformer's FFI kernels by target and shape (int8 steps, the C++ beam attention)
    assert ops["custom-call.5"] == profile.Op("jformer_int8_matmul f32[1,768]", "f32[1,768]")


def test_summarise_splits_step_ops_from_per_call_ops():
    ops = profile.classify(HLO)
    calls, steps = 2, 3
    events = ([dict(ph="X", name="ynn_fusion.2", dur=10.0)] * (calls * steps)
              + [dict(ph="X", name="dot.7", dur=4.0)] * (calls * steps)
              + [dict(ph="X", name="exp_fusion.4", dur=2.0)] * (calls * steps)
              + [dict(ph="X", name="exp_fusion.4", dur=50.0)]  # a 7th run: not per step
              + [dict(ph="X", name="ThunkExecutor::Execute", dur=999.0)] * 6
              + [dict(ph="i", name="dot.7", dur=1e6)])
    out = profile.summarise(events, ops, calls, steps)
    assert out["step_matmul"] == {("f32[1,768]", "f32,f32"): (10.0, 1),
                                  ("f32[4,1,32]", "f32,f32"): (4.0, 1)}
    assert out["step_other"] == {}
    # exp_fusion.4 ran 7 times, not calls * steps = 6: its whole time counts per call.
    assert out["call"] == pytest.approx((6 * 2.0 + 50.0) / calls)


@pytest.mark.slow
def test_profile_runs_end_to_end_on_a_short_search(capsys):
    profile.main(["--batch", "1", "--beam", "2", "--len", "4", "--calls", "2"])
    printed = capsys.readouterr().out
    assert "| **weight products** |" in printed
    assert "weight products f32[2,8192]" in printed  # the output projection, 2 beams
