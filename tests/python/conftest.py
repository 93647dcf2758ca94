"""A real shardps cluster for the Python client's tests: a coordinator and
servers started from the build tree on loopback, stopped afterwards."""
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BUILD = os.environ.get("SHARDPS_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SRC = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path[:0] = [os.path.join(BUILD, "client", "python"), os.path.join(SRC, "client", "python")]


class Cluster:
    def __init__(self, servers=2, workers=1, consistency="async", staleness=0):
        self.dir = tempfile.mkdtemp(prefix="shardps-pytest-")
        ep_file = os.path.join(self.dir, "coordinator.endpoint")
        args = [os.path.join(BUILD, "server", "shardps-coordinator"), "--servers", str(servers), "--workers",
                str(workers), "--consistency", consistency, "--endpoint-file", ep_file, "--no-metrics"]
        if consistency == "bounded":
            args += ["--staleness", str(staleness)]
        self.procs = [self._spawn(args, "coordinator.log")]
        deadline = time.monotonic() + 30
        while not (os.path.exists(ep_file) and open(ep_file).read().strip()):
            if self.procs[0].poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the coordinator did not write its endpoint within 30 s: " +
                                   open(os.path.join(self.dir, "coordinator.log")).read())
            time.sleep(0.02)
        self.endpoint = open(ep_file).read().strip()
        for i in range(servers):
            self.procs.append(self._spawn([os.path.join(BUILD, "server", "shardps-server"), "--coordinator",
                                           self.endpoint, "--rank", str(i), "--no-metrics"], f"server{i}.log"))

    def _spawn(self, argv, log):
        return subprocess.Popen(argv, stdout=open(os.path.join(self.dir, log), "w"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


@pytest.fixture
def cluster_factory():
    made = []

    def make(**kw):
        c = Cluster(**kw)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()
