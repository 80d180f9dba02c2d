"""bench/profile_translate.py (no timing): labels over several programs, and the trace's
op events and program spans summed by label and device."""
import importlib.util
import os
import re
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
LEGACY = os.path.join(os.path.dirname(__file__), "fixtures", "legacy_workdir")
sys.path.insert(0, BENCH)
_spec = importlib.util.spec_from_file_location(
    "bench_profile_translate", os.path.join(BENCH, "profile_translate.py"))
profile = importlib.util.module_from_spec(_spec)
sys.modules["bench_profile_translate"] = profile
_spec.loader.exec_module(profile)


def program(rows: int, fifth: str) -> str:
    """A decode program of ``rows`` rows: an output projection in a fusion, a packed
    kernel product, an attention product, and an instruction named ``fusion.5`` that
    is ``fifth`` ("exp" or "dot")."""
    body = (f"%fusion.5 = f32[{rows},16]{{1,0}} dot(%x, %w)" if fifth == "dot"
            else f"%fusion.5 = f32[{rows},16]{{1,0}} fusion(%x), kind=kLoop, calls=%e")
    return f"""HloModule jit_decode_program

%o (p0: f32[{rows},32], p1: f32[32,8000]) -> f32[{rows},8000] {{
  %p0 = f32[{rows},32]{{1,0}} parameter(0)
  %p1 = f32[32,8000]{{1,0}} parameter(1)
  ROOT %dot.3 = f32[{rows},8000]{{1,0}} dot(%p0, %p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

%e (p0: f32[{rows},32]) -> f32[{rows},16] {{
  %p0 = f32[{rows},32]{{1,0}} parameter(0)
  ROOT %exponential.1 = f32[{rows},16]{{1,0}} exponential(%p0)
}}

ENTRY %main (x: f32[{rows},32], w: f32[32,8000], k: f32[{rows},64,32]) -> f32[{rows},8000] {{
  %x = f32[{rows},32]{{1,0}} parameter(0)
  %w = f32[32,8000]{{1,0}} parameter(1)
  %k = f32[{rows},64,32]{{2,1,0}} parameter(2)
  %ynn_fusion.2 = f32[{rows},8000]{{1,0}} fusion(%x, %w), kind=kCustom, calls=%o
  %dot.7 = f32[{rows},1,64]{{2,1,0}} dot(%x, %k), lhs_batch_dims={{0}}
  %custom-call.4 = f32[{rows},1024]{{1,0}} custom-call(%x, %w), custom_call_target="jformer_rows_matmul", api_version=API_VERSION_TYPED_FFI
  {body}
  ROOT %r = f32[{rows},8000]{{1,0}} copy(%ynn_fusion.2)
}}
"""


def test_labels_hold_across_row_counts_and_flag_names_that_differ():
    labels = profile.labels_by_name([program(128, "exp"), program(32, "exp")])
    assert labels["ynn_fusion.2"] == "weight product [*,8000] (f32,f32)"
    assert labels["dot.7"] == "attention product, rank 3 (f32,f32)"
    assert labels["custom-call.4"] == "jformer_rows_matmul [*,1024]"
    assert labels["fusion.5"] == "fusion"
    mixed = profile.labels_by_name([program(128, "exp"), program(64, "dot")])
    assert mixed["fusion.5"] == profile.AMBIGUOUS  # a loop fusion here, a product there
    assert mixed["ynn_fusion.2"] == "weight product [*,8000] (f32,f32)"


def test_summarise_sums_ops_by_label_and_program_time_by_device():
    labels = profile.labels_by_name([program(128, "exp")])

    def op(name, dur):
        return dict(ph="X", name=name, dur=dur,
                    args=dict(hlo_module="jit_decode_program", hlo_op=name))

    events = ([op("ynn_fusion.2", 3e5)] * 4 + [op("custom-call.4", 1e5)] * 2
              + [op("while.1", 5e6)]  # no program lists it: it spans its body's ops
              + [dict(ph="X", name=profile.EXECUTE, dur=2e6, args=dict(device_ordinal="0"))]
              + [dict(ph="X", name=profile.EXECUTE, dur=1e6, args=dict(device_ordinal="1"))]
              + [dict(ph="i", name="ynn_fusion.2", dur=1e9, args=dict(hlo_op="ynn_fusion.2"))]
              + [dict(ph="X", name="PjitFunction(decode_program)", dur=9e9)])
    out = profile.summarise(events, labels)
    assert out["ops"] == {"weight product [*,8000] (f32,f32)": (pytest.approx(1.2), 4),
                          "jformer_rows_matmul [*,1024]": (pytest.approx(0.2), 2)}
    assert out["inside"] == {"0": pytest.approx(2.0), "1": pytest.approx(1.0)}
    assert out["skipped"] == {"while": 1}  # counted, its 5 s not summed


@pytest.mark.slow
def test_profile_runs_end_to_end_on_a_workdir(tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("a small test sentence\nanother one , a bit longer than the first\n")
    profile.main(["--workdir", LEGACY, "--src", str(src), "--calls", "1", "--beam", "2"])
    printed = capsys.readouterr().out
    assert "2 sentences," in printed and "device 0:" in printed
    assert "| **all ops** |" in printed
    # the decoder's packed products, or XLA's where the native kernels are off
    assert re.search(r"\| (jformer_rows_matmul|weight product) \[\*,\d+\]", printed)
