"""Stops what an interrupted end-to-end run left running and cleans the host (tests/e2e/run
calls it on exit; after a clean run there is nothing left to do)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))

from node import cleanup_host  # noqa: E402

MARK = "infergate-e2e-"


def processes_of_runs() -> list[int]:
    """Processes whose command line names a work directory of these tests."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if MARK in cmdline and "cleanup.py" not in cmdline and "pytest" not in cmdline:
            pids.append(int(entry.name))
    return pids


def main() -> int:
    pids = processes_of_runs()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.2)
    states = [p / "node" for p in Path(os.environ.get("TMPDIR", "/tmp")).glob(f"{MARK}*")
              if re.fullmatch(rf"{MARK}\w+", p.name)]
    for state in states or [None]:
        cleanup_host(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
