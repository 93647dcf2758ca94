"""The job description: the launcher's flags and the job file (TOML),
turned into the job as shardps-coordinator reads it (`--print-config`: one
parser with one set of error messages for the job file, --set and the
flags), and the worker command."""

import argparse
import json
import os
import subprocess

from .errors import LaunchError
from .output import PROG


def parse_args(argv):
    """(the parsed flags, the worker command after --). A bad flag exits 2
    with argparse's usage message; paths are made absolute (the processes
    may run elsewhere)."""
    worker_cmd = []
    if "--" in argv:
        i = argv.index("--")
        argv, worker_cmd = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog=PROG, description="Start a shardps job and stop all of it when it ends.",
                                 epilog="Everything can also come from the job file: see docs/operations.md.")
    ap.add_argument("--config", help="job file (TOML): [job], [[table]], [launch], [metrics]")
    ap.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a job-file key (repeatable)")
    ap.add_argument("--mode", choices=["local", "ssh", "slurm"], help="where processes run ([launch] mode)")
    ap.add_argument("--slurm", action="store_true", help="same as --mode slurm: inside salloc/sbatch, with srun")
    ap.add_argument("--hosts", help="ssh: a hosts file, one 'NAME [address=A] [coordinator] [servers=N] [workers=N]' a line")
    ap.add_argument("--interface", help="advertise each host's address on this interface")
    ap.add_argument("--advertise", help="the coordinator's address as the others dial it")
    ap.add_argument("--ssh-option", action="append", metavar="OPT", help="an ssh client argument (repeatable)")
    ap.add_argument("--servers", type=int, help="parameter servers ([job] servers; default 2)")
    ap.add_argument("--workers", type=int, help="worker processes ([job] workers; default 2)")
    ap.add_argument("--consistency", choices=["sync", "bounded", "async"])
    ap.add_argument("--staleness", type=int)
    ap.add_argument("--replicas", type=int, help="copies of each group of partitions on different servers ([job] "
                    "replicas; 2 or more: a dead server's partitions are served by their backups, no rollback)")
    ap.add_argument("--snapshot-dir", dest="snapshot_dir")
    ap.add_argument("--snapshot-every-clocks", dest="snapshot_every_clocks", type=int)
    ap.add_argument("--snapshot-every-sec", dest="snapshot_every_sec", type=int)
    ap.add_argument("--restore", action="store_true", help="start from the newest good snapshot in --snapshot-dir")
    ap.add_argument("--keys", help="security on: a key directory made by shardps-keygen ([security] keys); "
                    "every process gets the key of its role, all traffic is CURVE-encrypted; without it a job "
                    "over ssh or Slurm has security on with keys the launcher makes in the run directory")
    ap.add_argument("--no-security", dest="no_security", action="store_true",
                    help="security off even across hosts ([security] enabled = false): anyone who can reach the "
                         "job's ports can read, change and stop it")
    ap.add_argument("--run-dir", dest="run_dir", help="logs go there (default: a new temporary directory)")
    ap.add_argument("--bin-dir", dest="bin_dir",
                    help="where the shardps binaries are, on every host: an installed bin directory or a build directory")
    ap.add_argument("--timeout", type=int, help="stop everything after this many seconds ([launch] timeout_sec)")
    ap.add_argument("--restart-workers", dest="restart_workers", action="store_true", default=None,
                    help="start a failed worker again with its rank; it rejoins the running job ([launch] restart_workers)")
    ap.add_argument("--restart-servers", dest="restart_servers", action="store_true", default=None,
                    help="when a server dies, roll the job back to its newest snapshot and start every server and "
                         "worker again ([launch] restart_servers; needs snapshots); with --replicas 2 or more, a dead server is failed over "
                         "and a replacement started under its rank, filled with copies while the job runs")
    ap.add_argument("--restart-coordinator", dest="restart_coordinator", action="store_true", default=None,
                    help="start a dead coordinator again on the same endpoint; it resumes the job from its saved "
                         "state ([launch] restart_coordinator; the state goes to [job] state_dir, default RUN_DIR)")
    ap.add_argument("--etcd", help="keep the coordinator's state in etcd ([launch] etcd): 'local' starts a 3-member "
                    "cluster for the job (Debian's etcd; its data in the run directory), HOST:PORT,... uses a "
                    "running one")
    ap.add_argument("--standbys", type=int, help="standby coordinators ([coordinator] standbys; needs --etcd): one "
                    "takes over within seconds when the leader dies, on another host where there is one")
    ap.add_argument("--max-restarts", dest="max_restarts", type=int,
                    help="at most this many restarts per worker rank, and rollbacks ([launch] max_restarts; default 3)")
    ap.add_argument("--dry-run", action="store_true", help="print where each process would run and its command line")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every coordinator and server line too")
    args = ap.parse_args(argv)
    for name in ("snapshot_dir", "run_dir", "config", "hosts", "keys"):  # the processes may run elsewhere
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    if args.slurm:
        args.mode = "slurm"
    if args.hosts and not args.mode:
        args.mode = "ssh"
    for name in ("servers", "workers", "staleness", "snapshot_every_clocks", "snapshot_every_sec", "timeout",
                 "max_restarts", "replicas", "standbys"):
        least = 1 if name in ("servers", "timeout", "replicas") else 0
        v = getattr(args, name)
        if v is not None and v < least:
            ap.error(f"--{name.replace('_', '-')} must be at least {least}, got {v}")
    return args, worker_cmd


# The older flags and the job-file keys they set.
LEGACY_FLAGS = [("servers", "job.servers"), ("workers", "job.workers"), ("consistency", "job.consistency"),
                ("staleness", "job.staleness"), ("replicas", "job.replicas"), ("snapshot_dir", "job.snapshot_dir"),
                ("snapshot_every_clocks", "job.snapshot_every_clocks"),
                ("snapshot_every_sec", "job.snapshot_every_sec"), ("run_dir", "launch.run_dir"),
                ("bin_dir", "launch.bin_dir"), ("timeout", "launch.timeout_sec"), ("mode", "launch.mode"),
                ("max_restarts", "launch.max_restarts"), ("etcd", "launch.etcd"), ("standbys", "coordinator.standbys"),
                ("interface", "launch.interface"), ("advertise", "launch.advertise"), ("keys", "security.keys")]


def overrides(args):
    """The --set overrides the flags make, in order: the --set flags
    themselves, then the older flags (so that they win), each as
    SECTION.KEY=VALUE with strings in TOML (JSON) quotes."""
    sets = list(args.set or [])
    for attr, key in LEGACY_FLAGS:
        v = getattr(args, attr)
        if v is not None:
            sets.append(f"{key}={json.dumps(v) if isinstance(v, str) else v}")
    if args.no_security:
        sets.append("security.enabled=false")
    if args.restart_workers:
        sets.append("launch.restart_workers=true")
    if args.restart_servers:
        sets.append("launch.restart_servers=true")
    if args.restart_coordinator:
        sets.append("launch.restart_coordinator=true")
    if args.ssh_option:
        sets.append(f"launch.ssh_options={json.dumps(args.ssh_option)}")
    return sets


def resolve_config(args, coordinator):
    """The job as the coordinator reads it: job file, --set overrides and
    the older flags, checked and printed by `coordinator --print-config`
    itself. cfg["_sets"] keeps the overrides (the coordinator of the job
    gets them too). Raises LaunchError with the coordinator's message."""
    if args.config and not os.access(args.config, os.R_OK):
        raise LaunchError(f"cannot read job file '{args.config}'")
    sets = overrides(args)
    cmd = [coordinator, "--print-config"] + (["--config", args.config] if args.config else [])
    for s in sets:
        cmd += ["--set", s]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{coordinator} --print-config did not answer within 60 s")
    except OSError as e:
        raise LaunchError(f"cannot run {coordinator}: {e.strerror}")
    if p.returncode != 0:
        raise LaunchError(p.stderr.strip().removeprefix("error: ") or f"{coordinator} --print-config failed")
    try:
        cfg = json.loads(p.stdout)
    except ValueError as e:
        raise LaunchError(f"{coordinator} --print-config printed no job ({e}): is it a shardps-coordinator?")
    cfg["_sets"] = sets
    return cfg


def check_job(args, cfg, worker_cmd):
    """What the coordinator cannot check: --restore has snapshots to start
    from, there is a worker command, and server_ports has a port for every
    server. Returns the worker command (after
    --, else [launch] worker_command)."""
    if args.restore and not cfg["job"]["snapshot_dir"]:
        raise LaunchError("--restore needs a snapshot directory (--snapshot-dir or [job] snapshot_dir)")
    worker_cmd = list(worker_cmd or cfg["launch"]["worker_command"])
    if not worker_cmd:
        raise LaunchError("no worker command: give it after --, or as [launch] worker_command")
    lo, hi = cfg["launch"]["server_ports"]
    if lo and hi - lo + 1 < cfg["job"]["servers"]:
        raise LaunchError(f"server_ports {lo}-{hi} has no port left for server {hi - lo + 1}")
    return worker_cmd
