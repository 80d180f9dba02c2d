"""bench/profile_train.py (no timing): products told apart by their operand dtypes."""
import importlib.util
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
sys.path.insert(0, BENCH)


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


decode_profile = _load("profile_decode", "profile_decode.py")
train_profile = _load("bench_profile_train", "profile_train.py")

# A bf16 product kept on bf16 operands, and one whose fusion converts a bf16 operand to
# f32 first (what XLA does to a product it cannot run on its bf16 kernels).
HLO = """HloModule m

%fused_bf16 (p0: bf16[64,256], p1: bf16[256,1024]) -> f32[64,1024] {
  %p0 = bf16[64,256]{1,0} parameter(0)
  %p1 = bf16[256,1024]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,1024]{1,0} dot(bf16[64,256]{1,0} %p0, bf16[256,1024]{1,0} %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_upcast (p0: bf16[256,64], p1: bf16[64,1024]) -> f32[256,1024] {
  %p0 = bf16[256,64]{1,0} parameter(0)
  %convert.1 = f32[256,64]{1,0} convert(%p0)
  %p1 = bf16[64,1024]{1,0} parameter(1)
  %convert.2 = f32[64,1024]{1,0} convert(%p1)
  ROOT %dot.2 = f32[256,1024]{1,0} dot(%convert.1, %convert.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: bf16[64,256], w: bf16[256,1024], xt: bf16[256,64], g: bf16[64,1024]) -> f32[256,1024] {
  %x = bf16[64,256]{1,0} parameter(0)
  %w = bf16[256,1024]{1,0} parameter(1)
  %xt = bf16[256,64]{1,0} parameter(2)
  %g = bf16[64,1024]{1,0} parameter(3)
  %fwd_fusion = f32[64,1024]{1,0} fusion(%x, %w), kind=kCustom, calls=%fused_bf16
  ROOT %bwd_fusion.3 = f32[256,1024]{1,0} fusion(%xt, %g), kind=kOutput, calls=%fused_upcast
}
"""


def test_classify_reads_the_operand_dtypes_the_product_sees():
    ops = decode_profile.classify(HLO)
    assert ops["fwd_fusion"] == decode_profile.Op("matmul", "f32[64,1024]", "bf16,bf16")
    assert ops["bwd_fusion.3"] == decode_profile.Op("matmul", "f32[256,1024]", "f32,f32")


def test_by_operands_sums_products_over_shapes():
    ops = decode_profile.classify(HLO)
    steps = 2
    events = ([dict(ph="X", name="fwd_fusion", dur=3.0)] * steps
              + [dict(ph="X", name="bwd_fusion.3", dur=8.0)] * steps)
    summary = decode_profile.summarise(events, ops, steps, 1)
    assert summary["step_matmul"] == {("f32[64,1024]", "bf16,bf16"): (3.0, 1),
                                      ("f32[256,1024]", "f32,f32"): (8.0, 1)}
    assert train_profile.by_operands(summary["step_matmul"]) == {"bf16,bf16": (3.0, 1),
                                                                 "f32,f32": (8.0, 1)}


@pytest.mark.slow
def test_profile_runs_end_to_end_on_a_small_batch(capsys):
    train_profile.main(["--batch", "4", "--steps", "1", "--dtype", "bfloat16"])
    printed = capsys.readouterr().out
    assert "| products, operands bf16,bf16 |" in printed
    assert "| **all products** |" in printed
