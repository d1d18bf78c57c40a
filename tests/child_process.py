"""Killing a child process at a chosen moment: the resume tests SIGKILL a
fit (test_backup.py) or a training run (test_train_cli.py) in mid-epoch."""
import os
import signal
import time


def kill_after(child, ready, delay):
    """Read the child's text ``stdout`` until a line for which ``ready(line)``
    is true (or its end), sleep ``delay`` seconds, then SIGKILL the child,
    reap it and close its stdout (also when reading fails)."""
    try:
        for line in child.stdout:
            if ready(line):
                break
        time.sleep(delay)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
