"""The run directory as the job's interface (docs/operations.md, "The run
directory"): what scripts and Prometheus read instead of the launcher's
terminal output.

  RUN_DIR/job.json                  the coordinator's endpoint (with
                                    standbys: every coordinator's, and the
                                    etcd the job's state is in), security
                                    (on or off, the key directory), every
                                    process (role, rank, host, pid, state,
                                    metrics URL, endpoint, log), restarts and
                                    rollbacks so far, the job's state
  RUN_DIR/prometheus-targets.json   Prometheus file_sd: every /metrics
                                    endpoint now up, labelled job, role,
                                    rank and host

Both are rewritten atomically (a temporary file renamed over the old one)
whenever what they say changes, so a reader never sees half a file. The
metrics URLs and the processes' own pids come from the coordinator
(`shardps-ctl status --json`), asked every POLL_SEC by a thread of its own;
the rest is the launcher's."""

import json
import os
import subprocess
import threading
import time

POLL_SEC = 1.0  # how often the coordinator is asked for the processes' metrics URLs
FORMAT = 1  # job.json's "format": raised when a field changes meaning

# The job's states in job.json: "starting", "running", "rolling back", then
# one of the final ones.
FINAL_STATES = ("completed", "failed", "timed out", "stopped", "not started")


def write_atomically(path, obj):
    """`obj` as JSON into `path`, through a temporary file beside it renamed
    over it (readers see the old file or the new one, never a part)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


class StatusPoller:
    """Asks the coordinator for every process it knows (shardps-ctl status
    --json) every POLL_SEC, on a thread of its own, until stop(). `latest()`
    is the newest answer's processes, {(role, rank): {pid, alive,
    metrics_url, ...}} (any thread; `_lock` guards `_latest`)."""

    def __init__(self, ctl, key_args, coordinator):
        self.argv = [ctl, *key_args, "status", coordinator, "--json", "--timeout-sec", "5"]
        self._lock = threading.Lock()
        self._latest = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=12)

    def latest(self):
        with self._lock:
            return dict(self._latest)

    def _run(self):
        while not self._stop.is_set():
            procs = self.ask()
            if procs is not None:
                with self._lock:
                    self._latest = procs
            self._stop.wait(POLL_SEC)

    def ask(self):
        """One status, or None when the coordinator did not answer."""
        try:
            p = subprocess.run(self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, text=True, timeout=10)
            if p.returncode != 0:
                return None
            status = json.loads(p.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None
        return {(q.get("role"), q.get("rank")): q for q in status.get("processes", [])}


def target_of(url):
    """'http://host:port/path' -> ('host:port', '/path'), or None."""
    if not url or not url.startswith("http://"):
        return None
    rest = url[len("http://"):]
    hostport, _, path = rest.partition("/")
    return (hostport, "/" + path) if hostport else None


class RunDirFiles:
    """job.json and prometheus-targets.json of one launch. Main thread only
    (it reads the ProcessSet, which is the main thread's); the poller it
    starts keeps its thread to itself."""

    def __init__(self, run_dir, job, processes, security=None):
        self.run_dir = run_dir
        # {"on", "keys" (the key directory here, or None), "made_by_launcher"}:
        # what `shardps-ctl --run-dir` and shardps.connect(run_dir=) read.
        self.security = security or {"on": False, "keys": None, "made_by_launcher": False}
        self.name = os.path.basename(run_dir.rstrip("/"))  # the `job` label: the run directory's name
        self.job = job
        self.processes = processes  # ProcessSet
        self.job_path = os.path.join(run_dir, "job.json")
        self.targets_path = os.path.join(run_dir, "prometheus-targets.json")
        self.coordinator = None  # every coordinator's endpoint, comma-separated (standbys), the first to lead first
        self.etcd = None  # [launch] etcd: {"endpoints", "prefix", "started_by_launcher"}
        self.state = "starting"
        self.started_at = time.time()
        self.poller = None
        self.events = []  # restarts and rollbacks, in order: {"at_s", "what"}
        self.rollbacks = 0
        self.final = None
        self._written = (None, None)  # what the two files hold now
        # (role, rank, incarnation) -> the pid the coordinator gave for it:
        # until a restarted process registers, the coordinator still
        # describes the one before it, which must not be taken for it.
        self._pids = {}

    def set_coordinator(self, endpoint, ctl, key_args):
        """The coordinator listens: its processes are asked for from now on
        (when there is a shardps-ctl to ask with)."""
        self.coordinator = endpoint
        if ctl:
            self.poller = StatusPoller(ctl, key_args, endpoint).start()
        self.update()

    def note(self, what, rollback=False):
        """A restart or a rollback happened (the supervisor's words)."""
        self.events.append({"at_s": round(time.time() - self.started_at, 1), "what": what})
        self.rollbacks += 1 if rollback else 0
        self.update()

    def update(self, state=None):
        """Rewrites the files if what they say changed."""
        if state:
            self.state = state
        known = self.poller.latest() if self.poller else {}
        procs = [self.process_entry(p, known) for p in self.processes.procs]
        doc = {
            "format": FORMAT, "name": self.name, "state": self.state, "coordinator": self.coordinator,
            "coordinators": self.coordinator.split(",") if self.coordinator else [], "etcd": self.etcd,
            "run_dir": self.run_dir, "consistency": self.job.get("consistency"),
            "servers": self.job.get("servers"), "workers": self.job.get("workers"), "security": self.security,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
            "restarts": sum(1 for p in self.processes.procs if p.incarnation > 0),
            "rollbacks": self.rollbacks, "events": self.events, "processes": procs, "final": self.final,
        }
        targets = self.targets(procs)
        if (doc, targets) == self._written:
            return
        try:
            if doc != self._written[0]:
                write_atomically(self.job_path, doc)
            if targets != self._written[1]:
                write_atomically(self.targets_path, targets)
        except OSError:
            return  # the run directory went away: the job goes on without its files
        self._written = (doc, targets)

    def process_entry(self, p, known):
        newest = self.processes.newest((p.role,))
        is_newest = any(q is p for q in newest)
        rc = p.poll()
        entry = {"role": p.role, "rank": p.rank, "host": p.host, "incarnation": p.incarnation,
                 "launcher_pid": p.p.pid, "state": "running" if rc is None else p.describe_exit(),
                 "exit_status": rc, "log": p.log.name, "pid": None, "metrics_url": None}
        info = known.get((p.role, p.rank)) if is_newest and rc is None else None
        if p.role == "coordinator" and p.endpoint:  # standbys: the one that answered leads
            info = known.get(("coordinator", 0)) if is_newest and rc is None else None
            info = info if info and info.get("endpoint") == p.endpoint else None
        if info and any(self._pids.get((p.role, p.rank, k)) == info.get("pid") for k in range(p.incarnation)):
            info = None  # the coordinator's word on the process before this one
        if p.role == "coordinator" and p.endpoint:
            entry["endpoint"], entry["leading"] = p.endpoint, bool(info)
        if info:
            self._pids[(p.role, p.rank, p.incarnation)] = info.get("pid")
            entry["pid"] = info.get("pid")
            entry["metrics_url"] = info.get("metrics_url") or None
            if info.get("endpoint") and p.role != "worker":
                entry["endpoint"] = info["endpoint"]
            if "alive" in info:
                entry["alive"] = info["alive"]
        return entry

    def targets(self, procs):
        """file_sd groups: one per running process with a metrics URL."""
        groups = []
        for e in procs:
            t = target_of(e["metrics_url"]) if e["state"] == "running" and e.get("alive", True) else None
            if not t:
                continue
            labels = {"job": self.name, "role": e["role"], "rank": str(e["rank"]), "host": e["host"]}
            if t[1] != "/metrics":
                labels["__metrics_path__"] = t[1]
            groups.append({"targets": [t[0]], "labels": labels})
        return groups

    def finish(self, state, exit_status, message):
        """The job ended (after every process was stopped): its final state."""
        if self.poller:
            self.poller.stop()
            self.poller = None
        self.final = {"state": state, "exit_status": exit_status, "message": message,
                      "after_s": round(time.time() - self.started_at, 1)}
        self.update(state)
