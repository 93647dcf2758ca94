"""Helpers for the launcher tests: paths of the built binaries, starting
shardps-launch, waiting on its output, finding the processes it started."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = os.environ.get("SHARDPS_LAUNCH", os.path.join(ROOT, "tools", "shardps-launch"))
BUILD = os.environ.get("SHARDPS_BUILD", os.path.join(ROOT, "build"))
WORKER = os.path.join(BUILD, "worker", "shardps-worker")
COORDINATOR = os.path.join(BUILD, "server", "shardps-coordinator")
SERVER = os.path.join(BUILD, "server", "shardps-server")
CTL = os.path.join(BUILD, "tools", "shardps-ctl")

# Under the sanitizers (tools/sanitize.sh sets SHARDPS_SANITIZER), a test of
# the launcher's own logic — its signals, environment, output and exit
# status — is left out: the sanitizers watch the C++ processes, and those do
# in it nothing the other launches do not (CI's time goes to the recoveries).
launcher_logic = pytest.mark.skipif(
    bool(os.environ.get("SHARDPS_SANITIZER")),
    reason="the launcher's own logic: run in the plain suite, not again under " +
    os.environ.get("SHARDPS_SANITIZER", "a sanitizer"))


# A variant of a recovery whose C++ paths another test runs under the
# sanitizers too (CI's 70 minutes): in the plain suite only.
plain_only = pytest.mark.skipif(
    bool(os.environ.get("SHARDPS_SANITIZER")),
    reason="its C++ paths run under " + os.environ.get("SHARDPS_SANITIZER", "a sanitizer") +
    " in another test: this variant in the plain suite only")


# A case whose threads are those of other cases (CI's 70 minutes): left out
# under ThreadSanitizer, run plain and under ASan.
not_under_tsan = pytest.mark.skipif(
    os.environ.get("SHARDPS_SANITIZER") == "thread",
    reason="no thread of its own: run plain and under ASan, not again under TSan")


def small_mlp(epochs=2, extra=()):
    """A worker command that trains the MLP on a subset (seconds, not minutes)."""
    return [WORKER, "--coordinator", "{coordinator}", "--rank", "{rank}", "--model", "mlp", "--hidden", "64",
            "--epochs", str(epochs), "--train-limit", "6000", "--test-limit", "2000", "--progress-sec", "0.5",
            *extra]


class Launch:
    """shardps-launch running in the background; its output is collected."""

    def __init__(self, args, run_dir, cwd=ROOT, env=None, prefix=()):
        self.run_dir = run_dir
        argv = [*prefix, LAUNCH, "--run-dir", run_dir, "--bin-dir", BUILD, *args]
        self.lines = []
        self.times = []  # when each line arrived (time.monotonic())
        self.cond = threading.Condition()
        self.p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**os.environ, **(env or {})}, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.times.append(time.monotonic())
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def output(self):
        with self.cond:
            return "\n".join(self.lines)

    def lines_since(self, index, pattern):
        """(arrival time, line) of the lines from `index` on matching `pattern`."""
        rx = re.compile(pattern)
        with self.cond:
            return [(t, line) for t, line in zip(self.times[index:], self.lines[index:]) if rx.search(line)]

    def wait_for_line(self, pattern, timeout, since=0):
        """The first output line (from line `since` on) matching `pattern`;
        fails after `timeout` s."""
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines[since:]:
                    m = rx.search(line)
                    if m:
                        return m
                left = end - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self.reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r} within {timeout} s; output:\n" +
                                         "\n".join(self.lines[-40:]))
                self.cond.wait(min(left, 0.2))

    def wait(self, timeout):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"shardps-launch still running after {timeout} s; output:\n{self.output()}")
        self.reader.join(5)
        return rc

    def coordinator(self, timeout=60):
        return self.wait_for_line(r"coordinator (tcp://\S+) on", timeout).group(1)

    def signal(self, sig):
        os.kill(self.p.pid, sig)

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def started_by(run_dir):
    """Pids of live processes started by the launch that uses `run_dir` (the
    launcher puts SHARDPS_RUN_DIR in every process's environment)."""
    needle = f"SHARDPS_RUN_DIR={run_dir}".encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            pids.append(int(d))
    return pids


def wait_none_left(run_dir, timeout=10.0):
    """Asserts that within `timeout` s no process of that launch is alive."""
    end = time.monotonic() + timeout
    while True:
        left = started_by(run_dir)
        if not left:
            return
        if time.monotonic() > end:
            desc = []
            for pid in left:
                try:
                    desc.append(f"{pid}: " + open(f"/proc/{pid}/cmdline").read().replace("\0", " "))
                except OSError:
                    pass
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise AssertionError(f"processes still alive {timeout} s after shardps-launch exited:\n" + "\n".join(desc))
        time.sleep(0.1)


def pid_of(run_dir, program, *args):
    """The launch's process running `program` (a substring of argv[0]) with
    `args` as consecutive arguments."""
    for pid in started_by(run_dir):
        try:
            cmd = open(f"/proc/{pid}/cmdline").read().split("\0")
        except OSError:
            continue
        if not cmd or program not in cmd[0]:
            continue
        n = len(args)
        if any(tuple(cmd[i:i + n]) == tuple(args) for i in range(1, len(cmd) - n + 1)):
            return pid
    return None


def ctl(*args, timeout=60):
    p = subprocess.run([CTL, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


KEYGEN = os.path.join(BUILD, "tools", "shardps-keygen")


def make_keys(directory):
    """A job's keys (shardps-keygen DIR)."""
    p = subprocess.run([KEYGEN, directory], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    return directory


def read_json(path):
    """The JSON in `path`, or None while there is none (the launcher writes
    its run-directory files atomically: a file is whole or absent)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def wait_json(path, pred, timeout, what):
    """The JSON in `path` once pred(it) holds; fails after `timeout` s
    saying `what` it waited for, with the last content seen."""
    end = time.monotonic() + timeout
    while True:
        doc = read_json(path)
        if doc is not None and pred(doc):
            return doc
        if time.monotonic() > end:
            raise AssertionError(f"{path}: no {what} within {timeout} s; last seen:\n{json.dumps(doc, indent=1)}")
        time.sleep(0.1)


def wait_until(pred, timeout, what):
    """Waits until pred() holds; fails after `timeout` s saying `what` it waited for."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.1)
