"""Print, from a pytest log, what a crashed pytest-xdist worker's faulthandler wrote:
each "Fatal Python error" line and the top frames of the thread that crashed.

A worker that dies on a signal (a segmentation fault, an abort from C++) dumps every
thread's stack to stderr, and xdist relays it into the log above the test summary. CI's
log is read from its end, where the summary says only "worker 'gw0' crashed while
running ..."; this puts the cause under it.

    python .ci/crash_summary.py LOG [--frames N]
"""
import argparse
import re
import sys

FATAL = re.compile(r"Fatal Python error: .*")
CURRENT = re.compile(r"^\s*Current thread 0x[0-9a-f]+ .*\(most recent call first\):")
FRAME = re.compile(r'^\s*File ".*", line \d+ in ')


def crashes(lines: list[str], frames: int) -> list[list[str]]:
    """One block per fatal error in ``lines``: its "Fatal Python error" line, then the
    crashing ("Current") thread's header and up to ``frames`` of its frames, innermost
    first. A block without a "Current thread" header (cut short) keeps the error line."""
    blocks, i = [], 0
    while i < len(lines):
        m = FATAL.search(lines[i])
        if not m:
            i += 1
            continue
        block, i = [m.group(0)], i + 1
        while i < len(lines) and not FATAL.search(lines[i]):
            if CURRENT.match(lines[i]):
                block.append(lines[i].strip())
                i += 1
                while i < len(lines) and FRAME.match(lines[i]) and len(block) < frames + 2:
                    block.append("  " + lines[i].strip())
                    i += 1
                break
            i += 1
        blocks.append(block)
    return blocks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--frames", type=int, default=30)
    a = p.parse_args(argv)
    with open(a.log, errors="replace") as f:
        blocks = crashes(f.read().splitlines(), a.frames)
    if not blocks:
        print(f"{a.log}: no worker crashed (no 'Fatal Python error' in the log)")
        return 0
    for n, block in enumerate(blocks, 1):
        print(f"--- crash {n} of {len(blocks)} in {a.log} ---")
        print("\n".join(block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
