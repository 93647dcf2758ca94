"""What is launched: the command line and environment of every process of
a job (coordinator, servers, workers), from the job as the coordinator
read it, where each process runs, and the binaries; and how a command is
run on its host (here, over ssh with a watchdog, or as an srun step).
Nothing here starts a process."""

import json
import os
import re
import shlex

GRACE_SEC = 5.0  # SIGTERM, then this long, then SIGKILL

# Runs a command on a remote host so that it cannot outlive the connection:
# the command gets its own process group; a watchdog reads the ssh channel's
# standard input and, when it closes (the launcher stopped it, died, or the
# connection broke), terminates the group, then kills it.
REMOTE_WRAPPER = r"""
exec 3<&0 </dev/null
cd "$SHARDPS_LAUNCH_CWD" 2>/dev/null || cd "$SHARDPS_RUN_DIR" 2>/dev/null || true
setsid "$@" &
p=$!
( exec >/dev/null 2>&1; while read -r _ <&3; do :; done; kill -TERM -"$p"; sleep %d; kill -KILL -"$p" ) &
w=$!
wait "$p"; rc=$?
kill "$w" 2>/dev/null
# What the command left running in its group (a background child) goes too.
kill -TERM -"$p" 2>/dev/null && { sleep 1; kill -KILL -"$p" 2>/dev/null; }
exit "$rc"
""" % int(GRACE_SEC)


def ssh_options(launch):
    """The ssh client arguments of every connection: batch mode, bounded
    waits, then [launch] ssh_options (--ssh-option)."""
    return ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3"] + list(launch["ssh_options"])


def srun_step(host):
    """The srun arguments of one step on `host`, sharing the allocation's CPUs."""
    return ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}"]


def replace_all(s, subst):
    for k, v in subst.items():
        s = s.replace(k, v)
    return s


def worker_path(launch, environ):
    """The PATH a local worker command is looked up on: [launch] env's,
    else the launcher's (`environ`)."""
    return launch["env"].get("PATH", environ.get("PATH", os.defpath))


def local_paths(keys):
    """Key files as this machine (and a shared file system) sees them."""
    return lambda host, names: {n: os.path.join(keys, n) for n in names}


class JobCommands:
    """The command lines of one job. Pure (no process started, no file
    read): `key_paths(host, names)` gives each key file's path on a host
    (over ssh the launcher copies them there first). Main thread only."""

    def __init__(self, cfg, binaries, worker_cmd, run_dir, cwd, key_paths, keys="", restore=False):
        self.cfg, self.job, self.launch, self.metrics = cfg, cfg["job"], cfg["launch"], cfg["metrics"]
        self.mode = self.launch["mode"]
        self.binaries = binaries  # name -> path (Binaries.path)
        self.worker_cmd = worker_cmd
        self.run_dir, self.cwd = run_dir, cwd
        self.key_paths, self.keys, self.restore = key_paths, keys, restore
        self.ssh_options = ssh_options(self.launch)

    def env_for(self, extra=None):
        """What every process gets on top of the launcher's environment."""
        # SHARDPS_LAUNCH_CWD: remote commands run where the launcher runs if
        # that folder exists there (a shared file system), as srun does.
        env = {"SHARDPS_DIE_WITH_PARENT": "1", "SHARDPS_RUN_DIR": self.run_dir, "SHARDPS_LAUNCH_CWD": self.cwd,
               # Keys are handed out explicitly (workers: below); a $SHARDPS_KEY
               # of the launcher's own environment is not passed on.
               "SHARDPS_KEY": ""}
        env.update(self.launch["env"])
        env.update(extra or {})
        return env

    def command_for(self, role, rank, host, argv, env):
        """The command line that runs argv as `role rank` on `host`, and the
        environment to give it: argv itself here, ssh with the remote
        watchdog, or an srun step."""
        env = self.env_for(env)
        if self.mode == "local":
            return argv, env
        if self.mode == "ssh":
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            remote = f"{exports} exec sh -c {shlex.quote(REMOTE_WRAPPER)} shardps-remote " + " ".join(
                shlex.quote(a) for a in argv)
            return ["ssh"] + self.ssh_options + [host, remote], {}
        srun = srun_step(host) + ["--kill-on-bad-exit=0", "--unbuffered", "--export=ALL",
                                  f"--job-name=shardps-{role}{rank}"] + list(self.launch["srun_options"])
        return srun + argv, env

    def metrics_args(self, index, address):
        m = self.metrics
        if not m["enabled"]:
            return ["--no-metrics"]
        port = 0 if m["port"] == 0 else m["port"] + index
        return ["--metrics-port", str(port), "--metrics-address", m["address"] or address]

    def worker_metrics_args(self, rank, argv):
        """shardps-worker's /metrics as [metrics] says (a fixed port goes
        past the servers': P + 1 + servers + rank; the address, where none
        is given, is the one the worker routes to the coordinator), unless
        its command sets them itself. Another worker command is left as it
        is (a trainer of your own names its URL: ClientOptions::metrics_url)."""
        own = ("--metrics-port", "--metrics-address", "--no-metrics")
        if not argv or os.path.basename(argv[0]) != "shardps-worker" or any(a.split("=")[0] in own for a in argv):
            return []
        m = self.metrics
        if not m["enabled"]:
            return ["--no-metrics"]
        port = 0 if m["port"] == 0 else m["port"] + 1 + self.job["servers"] + rank
        return ["--metrics-port", str(port)] + (["--metrics-address", m["address"]] if m["address"] else [])

    def server_key_args(self, host):
        if not self.keys:
            return []
        k = self.key_paths(host, ["server.key", "access"])
        return ["--key", k["server.key"], "--access", k["access"]]

    def bind_host(self, address):
        return "127.0.0.1" if self.mode == "local" and address.startswith("127.") else "0.0.0.0"

    def coordinator(self, host, address, job_file, port=None, standby=False):
        """The coordinator's argv on `host`, advertising `address`, on
        `port` (else [launch] coordinator_port); it reads `job_file` (its
        path there) and the launcher's overrides. `standby`: it waits to
        lead the job (its state in etcd)."""
        port = self.launch['coordinator_port'] if port is None else port
        argv = [self.binaries("shardps-coordinator"), "--bind",
                f"tcp://{self.bind_host(address)}:{port}", "--advertise", address]
        if standby:
            argv.append("--standby")
        if job_file:
            argv += ["--config", job_file]
        for s in self.cfg["_sets"]:
            argv += ["--set", s]
        if self.restore:
            argv.append("--restore")
        # (A standby serves /metrics while it waits: a fixed [metrics] port is
        # the first coordinator's; a standby's is free, found through the
        # status once it leads.)
        metrics = self.metrics_args(0, address)
        if standby and "--metrics-port" in metrics:
            metrics[metrics.index("--metrics-port") + 1] = "0"
        return argv + metrics + self.server_key_args(host)

    def server(self, rank, host, address, coordinator):
        """Server `rank`'s argv on `host`, advertising `address`."""
        lo = self.launch["server_ports"][0]
        port = 0 if lo == 0 else lo + rank
        argv = [self.binaries("shardps-server"), "--coordinator", coordinator, "--rank", str(rank),
                "--bind", f"tcp://{self.bind_host(address)}:{port}", "--advertise", address]
        argv += self.metrics_args(1 + rank, address)
        cpus = self.launch["server_cpus"]
        if cpus:
            argv += ["--cpus", cpus[rank % len(cpus)]]
        if self.job.get("server_memory_mb"):
            argv += ["--memory-budget-mb", str(self.job["server_memory_mb"])]
        # Tiered tables' rows past the budget: RUN_DIR/shardps-cold-RANK,
        # made only if the job has one, removed as the server stops.
        argv += ["--cold-dir", self.run_dir]
        return argv + self.server_key_args(host)

    def worker(self, rank, host, coordinator):
        """Worker `rank`'s (argv, environment) on `host`: the worker command
        with {coordinator}, {rank} and {workers} replaced, and the same in
        SHARDPS_COORDINATOR, SHARDPS_RANK, SHARDPS_WORKERS (SHARDPS_KEY too,
        with security on)."""
        n = str(self.job["workers"])
        subst = {"{coordinator}": coordinator, "{rank}": str(rank), "{workers}": n}
        argv = [replace_all(a, subst) for a in self.worker_cmd]
        argv += self.worker_metrics_args(rank, argv)
        env = {"SHARDPS_COORDINATOR": coordinator, "SHARDPS_RANK": str(rank), "SHARDPS_WORKERS": n}
        if self.keys:  # the client library (and shardps-worker's --key) read $SHARDPS_KEY
            env["SHARDPS_KEY"] = self.key_paths(host, ["worker.key"])["worker.key"]
        return argv, env


def on_endpoint(argv, coordinator):
    """A coordinator's argv, bound to the port of `coordinator` (its
    endpoint): to start a dead one again where the others look for it."""
    port = coordinator.rsplit(":", 1)[1]
    return [re.sub(r":\d+$", f":{port}", a) if i > 0 and argv[i - 1] == "--bind" else a for i, a in enumerate(argv)]


ENDPOINT = re.compile(r"coordinator on (tcp://\S+?):? ")


def endpoint_in(line):
    """The endpoint in the coordinator's line 'coordinator on tcp://H:P: ...', or None."""
    m = ENDPOINT.search(line + " ")
    return m.group(1) if m else None


def json_set(key, value):
    """One --set override of a string value."""
    return f"{key}={json.dumps(value)}"
