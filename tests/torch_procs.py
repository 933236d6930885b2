"""Run a command that starts processes, bounded: on timeout its whole process group is killed."""
from __future__ import annotations

import os
import signal
import subprocess
from typing import Dict, Optional, Sequence, Tuple


def run_bounded(cmd: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Tuple[int, str]:
    """(exit code, stdout + stderr); exit code -9 and a note when it ran past `timeout` seconds."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the spawned ranks too, not only their parent
        out, _ = proc.communicate()
        return -9, f"{out}\n[timed out after {timeout} s]"
