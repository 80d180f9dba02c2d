""".ci/crash_summary.py: a real faulthandler dump (a child process that segfaults) is
reduced to its fatal error and the crashing thread's innermost frames."""
import importlib.util
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, ".ci", "crash_summary.py")
_spec = importlib.util.spec_from_file_location("crash_summary", SCRIPT)
crash_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_summary)

CRASHER = textwrap.dedent("""
    import ctypes, faulthandler, threading, time
    faulthandler.enable()
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a bystander

    def innermost_frame_of_the_crash():
        ctypes.string_at(0)  # reads address 0: SIGSEGV

    def outer():
        innermost_frame_of_the_crash()

    print("some test output", flush=True)
    outer()
""")


def crashed_log(tmp_path) -> str:
    """The combined output of a Python process that segfaults with faulthandler on."""
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    log = tmp_path / "pytest.log"
    log.write_text(r.stdout + r.stderr + "\n1 failed, 3 passed in 9.99s\n")
    return str(log)


def test_a_segfault_is_reduced_to_its_error_and_the_crashing_threads_frames(tmp_path):
    log = crashed_log(tmp_path)
    r = subprocess.run([sys.executable, SCRIPT, log, "--frames", "2"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"--- crash 1 of 1 in {log} ---"
    assert lines[1] == "Fatal Python error: Segmentation fault"
    assert lines[2].startswith("Current thread 0x")
    # the innermost frames first, two of them, and not the bystander thread's
    assert len(lines) == 5
    assert lines[3].endswith(" in string_at")  # ctypes' own frame, then the caller's
    assert lines[4].endswith(" in innermost_frame_of_the_crash") and "crasher.py" in lines[4]
    assert "sleep" not in r.stdout


def test_every_crash_in_a_log_is_listed_and_a_clean_log_says_none(tmp_path):
    text = open(crashed_log(tmp_path)).read()
    two = tmp_path / "two.log"
    two.write_text(text + text)
    blocks = crash_summary.crashes(two.read_text().splitlines(), frames=30)
    assert len(blocks) == 2
    assert all(b[0] == "Fatal Python error: Segmentation fault" for b in blocks)
    assert all("innermost_frame_of_the_crash" in "\n".join(b) for b in blocks)
    clean = tmp_path / "clean.log"
    clean.write_text("....\n4 passed in 1.00s\n")
    r = subprocess.run([sys.executable, SCRIPT, str(clean)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    assert r.stdout == f"{clean}: no worker crashed (no 'Fatal Python error' in the log)\n"


def test_a_dump_cut_before_its_current_thread_keeps_the_error_line():
    lines = ["Fatal Python error: Aborted", "", "Thread 0x01 (most recent call first):",
             '  File "x.py", line 1 in f']
    assert crash_summary.crashes(lines, frames=30) == [["Fatal Python error: Aborted"]]
