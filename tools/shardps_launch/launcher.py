"""The launcher's front end: one job from its description to its end,
delegating each concern to its part -- placement (which host runs what),
host checks (before anything trains), commands (what is launched),
processes (starting and stopping them) and the supervisor (what to do
when one ends)."""

import os
import shutil
import tempfile
import threading
import time

from .binaries import check_worker_command
from .commands import JobCommands, endpoint_in, json_set, local_paths, worker_path
from .coordinators import Etcd, PortPicker, coordinator_hosts, start_coordinators, start_etcd
from .errors import JobFailed, LaunchError
from .hostcheck import HostChecks, Remote, run_parallel
from .output import say
from .placement import dry_run_addresses, job_hosts, place, used_hosts
from .procs import ProcessSet
from .rundir import RunDirFiles
from . import security
from .supervise import Supervisor, stop_watcher

ENDPOINT_WAIT_SEC = 60  # for the coordinator to report where it listens

def make_run_dir(run_dir):
    """The run directory (logs), made if needed; a new temporary one when
    none is given. Raises LaunchError when it cannot be made or written."""
    try:
        run_dir = run_dir or tempfile.mkdtemp(prefix="shardps-run-")
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        raise LaunchError(f"cannot create the run directory {run_dir or '(a temporary one)'}: {e.strerror}")
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise LaunchError(f"cannot write into the run directory {run_dir}")
    return os.path.abspath(run_dir)


class Launcher:
    """One launch. Main thread only: the parts it calls keep their own
    threads (a reader per process, the parallel host checks) to themselves."""

    def __init__(self, args, cfg, worker_cmd, binaries, t0):
        self.args, self.cfg = args, cfg
        self.job, self.launch = cfg["job"], cfg["launch"]
        self.mode = self.launch["mode"]
        self.binaries = binaries  # Binaries: every one the job needs, resolved (binaries.job_needs)
        self.t0 = t0
        self.security = security.plan(cfg)  # 'given', 'make' or 'off'
        self.keys = security.check_keys(cfg["security"]["keys"]) if self.security == "given" else ""
        if self.mode == "local":
            check_worker_command(worker_cmd[0], worker_path(self.launch, os.environ))
        self.run_dir = make_run_dir(self.launch["run_dir"])
        if self.security == "make":
            self.keys = (os.path.join(self.run_dir, security.MADE_DIR) if args.dry_run
                         else security.make_keys(binaries.path("shardps-keygen"), self.run_dir))
        self.standbys = cfg["coordinator"]["standbys"]
        self.etcd = Etcd(self.launch["etcd"], self.run_dir, os.path.basename(self.run_dir.rstrip("/"))) \
            if self.launch["etcd"] else None
        if self.launch["restart_coordinator"] and not self.job.get("state_dir") and not self.etcd:
            # A coordinator started again resumes from its saved state; this
            # job's (a reused run directory may hold an old one).
            self.job["state_dir"] = os.path.join(self.run_dir, "coordinator-state")
            shutil.rmtree(self.job["state_dir"], ignore_errors=True)
            cfg["_sets"].append(json_set("job.state_dir", self.job["state_dir"]))
        self.remote_keys = {}  # host -> the key files already copied there (ssh)
        self.commands = JobCommands(cfg, binaries.path, worker_cmd, self.run_dir, os.getcwd(), self.key_paths,
                                    self.keys, args.restore)
        self.processes = ProcessSet(self.commands, self.run_dir, args.verbose, args.dry_run)
        self.remote = Remote(self.mode, self.launch)
        self.ports = PortPicker(self.remote, self.mode == "local", args.dry_run)  # fixed ports (etcd, standbys)
        self.checks = HostChecks(self.remote, self.launch, self.run_dir, self.processes)
        self.stop_requested = threading.Event()  # shardps-ctl stop: the job ends itself
        self.stopped_by_launcher = threading.Event()  # the stop was this launcher's (a final snapshot at the end)
        self.coordinator = None  # its endpoint, once it listens
        # RUN_DIR/job.json and prometheus-targets.json (rundir.py)
        self.files = None if args.dry_run else RunDirFiles(self.run_dir, self.job, self.processes,
                                                           {"on": bool(self.keys), "keys": self.keys or None,
                                                            "made_by_launcher": self.security == "make"})
        if self.files:  # a reused run directory's job.json names the old job no longer
            self.files.update()

    def key_paths(self, host, names):
        """The key files `names` as `host` sees them: the job's key directory
        here (a local job); over ssh and Slurm, copied (mode 600, through the
        ssh channel or an srun step) into RUN_DIR/keys on that host, only the
        files that host needs."""
        if self.mode == "local":
            return local_paths(self.keys)(host, names)
        remote_dir = os.path.join(self.run_dir, "keys")
        if self.args.dry_run:  # where they would be copied
            return local_paths(remote_dir)(host, names)
        have = self.remote_keys.setdefault(host, set())
        for n in names:
            if n in have:
                continue
            with open(os.path.join(self.keys, n)) as f:
                text = f.read()
            rc, out = self.remote.copy_to(host, text, os.path.join(remote_dir, n), mode600=True)
            if rc != 0:
                raise LaunchError(f"host {host}: cannot copy the key {n}: {out}")
            have.add(n)
        return {n: os.path.join(remote_dir, n) for n in names}

    def hand_out_keys(self, placement, coords):
        """Over ssh and Slurm, before anything starts: each host's keys
        (server.key and access where the coordinator or a server runs,
        worker.key where a worker runs) copied there in one command, every
        host at once. Raises LaunchError naming each host that failed."""
        if self.mode == "local" or not self.keys or self.args.dry_run:
            return
        need = {}
        for h in [*coords, *placement.servers]:
            need.setdefault(h["name"], set()).update(("server.key", "access"))
        for h in placement.workers:
            need.setdefault(h["name"], set()).add("worker.key")
        remote_dir = os.path.join(self.run_dir, "keys")
        items = sorted(need.items())
        texts = {n: security.read_key(self.keys, n) for names in need.values() for n in names}

        tags = {host: i for i, (host, _) in enumerate(items)}

        def copy(item):
            host, names = item
            script = security.copy_script(remote_dir, [(n, texts[n]) for n in sorted(names)], tags[host])
            rc, out = self.remote.run_on(host, script,
                                         timeout=60, stdin="".join(texts[n] for n in sorted(names)))
            return "" if rc == 0 else f"host {host}: cannot copy the job's keys into {remote_dir}: {out}"
        results = run_parallel(copy, items, timeout=90)  # None: still copying after 90 s
        problems = [r if r is not None else f"host {h}: the copy of the job's keys did not finish within 90 s"
                    for (h, _), r in zip(items, results) if r != ""]
        if problems:
            raise LaunchError("security: " + "\n  ".join(problems))
        for host, names in items:
            self.remote_keys[host] = set(names)

    def run(self):
        """Places, checks, starts and supervises the job; returns its exit
        status (0) or raises LaunchError, JobFailed or JobTimeout."""
        job = self.job
        hosts = job_hosts(self.mode, self.args.hosts, self.launch["hosts"], os.environ)
        placement = place(hosts, job["servers"], job["workers"])
        coords = coordinator_hosts(hosts, placement.coordinator, 1 + self.standbys)
        used = used_hosts(placement)
        used += [h for h in coords if h not in used]
        if not self.keys and self.mode != "local":
            say(security.exposed_warning([h["name"] for h in used]), err=True)
        addr = self.addresses(placement, used)
        self.hand_out_keys(placement, coords)
        line = security.start_line(self.security, self.keys, self.mode, self.run_dir, self.args.dry_run)
        if line:
            say(line)
        start_etcd(self, coords, used, addr)  # ([launch] etcd; coordinators.py)
        coordinator = start_coordinators(self, coords, addr)
        for i, h in enumerate(placement.servers):
            argv = self.commands.server(i, h["name"], addr[h["name"]], coordinator)
            self.processes.start("server", i, h["name"], argv, {})
        for r, h in enumerate(placement.workers):
            argv, env = self.commands.worker(r, h["name"], coordinator)
            self.processes.start("worker", r, h["name"], argv, env)
        if self.args.dry_run:
            return 0
        self.files.update("running")
        return Supervisor(self.launch, job, self.processes, self.binaries, self.keys, self.coordinator,
                          self.stop_requested, self.t0, self.files, self.stopped_by_launcher, self.standbys).run()

    def addresses(self, placement, used):
        """{host name: the address the others dial there}; over ssh and
        Slurm after the checks of every host used."""
        if self.mode == "local":
            return {"localhost": self.launch["advertise"] or "127.0.0.1"}
        if self.args.dry_run:
            say("dry run: would start")
            return dry_run_addresses(used, placement.coordinator, self.launch["advertise"])
        path = self.binaries.path
        needed = [path("shardps-coordinator"), path("shardps-server"), path("shardps-ctl")]
        worker = self.commands.worker_cmd[0]
        if "/" in worker:
            needed.append(worker)
        self.checks.preflight(used, needed)
        addr = self.checks.addresses(placement.coordinator, used)
        self.checks.reachability(used, addr, path("shardps-ctl"))
        say("hosts checked: " + ", ".join(f"{h['name']} ({addr[h['name']]})" for h in used) +
            f" in {time.monotonic() - self.t0:.2f} s")
        return addr

    def job_file_for(self, host):
        """The job file's path on the coordinator's host: over ssh the hosts
        need not share a file system, so it travels."""
        job_file = self.args.config
        if not job_file or self.mode != "ssh" or self.args.dry_run:
            return job_file
        remote_job = os.path.join(self.run_dir, "job.toml")
        try:
            with open(job_file) as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise LaunchError(f"cannot read job file '{job_file}': {e}")
        rc, out = self.remote.copy_to(host, text, remote_job)
        if rc != 0:
            raise LaunchError(f"host {host}: cannot copy the job file: {out}")
        return remote_job

    def start_coordinator(self, host, addr, port=None, all_endpoints=None):
        """Starts the coordinator and waits until it reports its endpoint
        (at most ENDPOINT_WAIT_SEC); returns the endpoint."""
        name = host["name"]
        c_addr = addr[name]
        argv = self.commands.coordinator(name, c_addr, self.job_file_for(name), port=port)
        # Written by the coordinator's reader thread before it sets `ready`;
        # read by this thread after `ready` is set.
        endpoint_box = []
        ready = threading.Event()

        def watch(line):
            endpoint = endpoint_in(line)
            if endpoint and not endpoint_box:
                endpoint_box.append(endpoint)
                ready.set()
        # Its watchers are in place before it starts: none misses a line.
        coord = self.processes.start("coordinator", 0, name, argv, {}, watchers=[watch, stop_watcher(self.stop_requested)])
        if self.args.dry_run:
            return all_endpoints or f"tcp://{c_addr}:<port>"
        deadline = time.monotonic() + ENDPOINT_WAIT_SEC
        noted = False
        while not ready.wait(0.1):
            if not noted and time.monotonic() > deadline - ENDPOINT_WAIT_SEC + 3:
                noted = True
                until = time.strftime("%H:%M:%S", time.localtime(time.time() + deadline - time.monotonic()))
                say(f"waiting for the coordinator on {name} to report its endpoint (for 3 s now; giving up at {until})")
            if coord.poll() is not None:
                raise JobFailed(coord, "the coordinator exited before it listened")
            if time.monotonic() > deadline:
                raise JobFailed(coord, f"the coordinator did not report its endpoint within {ENDPOINT_WAIT_SEC} s")
        coord.endpoint = endpoint_box[0]
        self.coordinator = all_endpoints or endpoint_box[0]
        observer = ["--key", os.path.join(self.keys, "observer.key")] if self.keys else []
        self.files.set_coordinator(self.coordinator, self.binaries.optional("shardps-ctl"), observer)
        job = self.job
        say(f"coordinator {self.coordinator} on {name}, {job['servers']} servers, {job['workers']} workers "
            f"({job['consistency']}{' s=' + str(job['staleness']) if job['consistency'] == 'bounded' else ''}), "
            f"logs in {self.run_dir}")
        return self.coordinator
