"""Everything the launcher prints: its own messages, every process's lines
prefixed with role, rank and host, and the reports of failures.

Any thread writes (the main thread, and each process's reader thread):
OUTPUT_LOCK guards sys.stdout and sys.stderr, so lines never interleave."""

import re
import sys
import threading

PROG = "shardps-launch"
OUTPUT_LOCK = threading.Lock()  # guards sys.stdout and sys.stderr: one whole line at a time
WARNING = re.compile(r"^\S+ [WE] \[")  # a shardps log line at warn or error level


def emit(line, err=False):
    """Writes one line; never blocks the launcher for long or kills a reader
    thread on a stalled or closed terminal (the logs keep everything)."""
    stream = sys.stderr if err else sys.stdout
    if not OUTPUT_LOCK.acquire(timeout=5):
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass
    finally:
        OUTPUT_LOCK.release()


def say(msg, err=False):
    emit(f"{PROG}: {msg}", err)


def report(proc, msg):
    """A failure the job survives: the message and the process's last 5 lines."""
    say(msg, err=True)
    for line in proc.last_lines()[-5:]:
        emit(f"  {proc.prefix}{line}", err=True)


def failure_lines(error, run_dir):
    """The final report of a JobFailed: what failed, its last lines, where the logs are."""
    p = error.proc
    return ([f"{error}: the job was stopped; its last lines:"] + [f"  {p.prefix}{line}" for line in p.last_lines()] +
            [f"all logs in {run_dir}"])


def print_report(lines):
    """The final report, on stderr: indented lines as they are, the others after the program's name."""
    for line in lines:
        emit(line if line.startswith("  ") else f"{PROG}: {line}", err=True)
