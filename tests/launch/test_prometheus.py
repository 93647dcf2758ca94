"""shardps against a real Prometheus (Debian's prometheus and promtool,
started here on a free port with storage of its own; skipped with the
reason where they cannot run). A job is launched, Prometheus reads the
run directory's prometheus-targets.json (as docs/examples/prometheus.yml
does), every target comes up, `promtool check metrics` passes on every
endpoint, every PromQL expression of the Grafana dashboard
(docs/grafana/shardps.json) answers with data, and a restarted worker's
and a rolled-back server's new endpoints become targets without editing
anything."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from launchlib import ROOT, Launch, ctl, read_json, small_mlp, wait_json, wait_none_left

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
DASHBOARD = os.path.join(ROOT, "docs", "grafana", "shardps.json")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prometheus:
    """prometheus scraping `targets_file` every second, on a free port."""

    def __init__(self, tmp_path, targets_file):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                       "scrape_configs:\n  - job_name: shardps\n    file_sd_configs:\n"
                       f"      - files: ['{targets_file}']\n        refresh_interval: 1s\n")
        self.log = open(tmp_path / "prometheus.log", "w")
        self.p = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                  stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + 60
        while True:
            try:
                get(self.url + "/-/ready", 2)
                return
            except OSError:
                pass
            if self.p.poll() is not None or time.monotonic() > end:
                self.stop()
                pytest.skip(f"prometheus did not start (exit {self.p.poll()}): {open(tmp_path / 'prometheus.log').read()[-2000:]}")
            time.sleep(0.2)

    def api(self, path, **params):
        body = json.loads(get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        assert body["status"] == "success", body
        return body["data"]

    def wait(self, what, fn, timeout):
        """fn()'s value once it is truthy; fails after `timeout` s naming `what`."""
        end, last = time.monotonic() + timeout, None
        while True:
            last = fn()
            if last:
                return last
            if time.monotonic() > end:
                raise AssertionError(f"Prometheus: no {what} within {timeout} s; last: {json.dumps(last)[:3000]}")
            time.sleep(0.5)

    def up_targets(self):
        """{scrape URL: labels} of the active targets that are up."""
        return {t["scrapeUrl"]: t["labels"] for t in self.api("targets")["activeTargets"] if t["health"] == "up"}

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.close()


def dashboard_exprs(job):
    """Every PromQL expression of the dashboard, its variables filled in as
    Grafana would for this job and all servers."""
    dash = json.load(open(DASHBOARD))
    exprs = []
    for panel in dash["panels"]:
        for t in panel["targets"]:
            e = t["expr"].replace("$job", job).replace("$server", ".*").replace("$__rate_interval", "15s")
            exprs.append((panel["title"], e))
    return exprs


@pytest.mark.skipif(not PROMETHEUS or not PROMTOOL, reason="no prometheus/promtool (Debian's prometheus package)")
def test_prometheus_scrapes_the_run_directory_and_answers_the_dashboard(tmp_path):
    run_dir = str(tmp_path / "promjob")
    snaps = str(tmp_path / "snaps")
    launch = Launch(["--servers", "2", "--workers", "2", "--consistency", "sync", "--snapshot-dir", snaps,
                     "--snapshot-every-clocks", "20", "--restart-servers", "--restart-workers", "--",
                     *small_mlp(epochs=100000)], run_dir)
    prom = None
    try:
        targets_file = os.path.join(run_dir, "prometheus-targets.json")
        wait_json(targets_file, lambda t: len(t) == 5, 120, "5 targets")
        prom = Prometheus(tmp_path, targets_file)
        up = prom.wait("5 targets up", lambda: (lambda u: u if len(u) == 5 else None)(prom.up_targets()), 60)
        assert sorted((l["role"], l["rank"]) for l in up.values()) == [
            ("coordinator", "0"), ("server", "0"), ("server", "1"), ("worker", "0"), ("worker", "1")], up
        assert all(l["job"] == "promjob" and l["host"] == "localhost" for l in up.values()), up

        # Every endpoint's exposition passes promtool's checks.
        for url in up:
            check = subprocess.run([PROMTOOL, "check", "metrics"], input=get(url), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=60)
            assert check.returncode == 0, f"{url}: {check.stdout}"

        # Every expression of the dashboard answers with data.
        for title, expr in dashboard_exprs("promjob"):
            prom.wait(f"data for '{title}': {expr}", lambda: prom.api("query", query=expr)["result"], 90)

        # A worker's own series are scraped.
        w1 = prom.wait("worker 1's clock", lambda: prom.api("query", query='shardps_trainer_clock{role="worker",rank="1"}')["result"], 60)
        assert float(w1[0]["value"][1]) > 0, w1

        # A worker dies and is started again: its new endpoint is a target, the old one gone.
        job = read_json(os.path.join(run_dir, "job.json"))
        w0 = [p for p in job["processes"] if p["role"] == "worker" and p["rank"] == 0 and p["state"] == "running"][0]
        os.kill(w0["pid"], signal.SIGKILL)
        job = wait_json(os.path.join(run_dir, "job.json"), lambda j: any(
            p["role"] == "worker" and p["rank"] == 0 and p["incarnation"] == 1 and p["metrics_url"]
            and p["pid"] != w0["pid"] for p in j["processes"]), 120, "worker 0's restart with its new endpoint")
        new_w0 = [p for p in job["processes"] if p["role"] == "worker" and p["rank"] == 0 and p["incarnation"] == 1][0]
        assert new_w0["metrics_url"] != w0["metrics_url"], job
        prom.wait(f"target {new_w0['metrics_url']} up, {w0['metrics_url']} gone",
                  lambda: (lambda u: u if new_w0["metrics_url"] in u and w0["metrics_url"] not in u else None)(
                      prom.up_targets()), 60)

        # A server dies: the job rolls back, its new endpoint is a target.
        job = read_json(os.path.join(run_dir, "job.json"))
        s1 = [p for p in job["processes"] if p["role"] == "server" and p["rank"] == 1 and p["state"] == "running"][0]
        os.kill(s1["pid"], signal.SIGKILL)
        job = wait_json(os.path.join(run_dir, "job.json"), lambda j: j["rollbacks"] == 1 and j["state"] == "running" and any(
            p["role"] == "server" and p["rank"] == 1 and p["incarnation"] == 1 and p["metrics_url"] and p["pid"] != s1["pid"]
            for p in j["processes"]), 120, "rolled-back job with server 1's new endpoint")
        new_url = [p for p in job["processes"] if p["role"] == "server" and p["rank"] == 1 and p["incarnation"] == 1][0]["metrics_url"]
        assert new_url != s1["metrics_url"], job
        prom.wait(f"target {new_url} up, {s1['metrics_url']} gone",
                  lambda: (lambda u: u if new_url in u and s1["metrics_url"] not in u else None)(prom.up_targets()), 60)

        rc, out = ctl("stop", job["coordinator"])
        assert rc == 0, out
        assert launch.wait(120) == 0, launch.output()
        assert read_json(os.path.join(run_dir, "job.json"))["state"] == "stopped"
    finally:
        if prom:
            prom.stop()
        if launch.p.poll() is None:
            launch.kill()
    wait_none_left(run_dir)
