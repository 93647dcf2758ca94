"""shardps-launch's main: the flags and the job file to a Launcher, its run
to an exit status and a final report. Every user error is a message and
an exit status (errors.py), never a traceback."""

import signal

from .binaries import BINARIES, Binaries, job_needs
from .errors import EXIT_FAILED, EXIT_TIMEOUT, EXIT_USAGE, JobFailed, JobTimeout, LaunchError
from .jobfile import check_job, parse_args, resolve_config
from .launcher import Launcher
from .output import failure_lines, print_report, say
from .procs import STOP_SIGNALS
from . import security


def prepare(args, worker_cmd, script_dir, t0):
    """Everything before the first process starts: the job, every binary it
    needs, the run directory, the keys. Raises LaunchError."""
    reader = Binaries(args.bin_dir, script_dir)
    reader.resolve({"shardps-coordinator": "it reads the job file"})
    cfg = resolve_config(args, reader.path("shardps-coordinator"))
    worker_cmd = check_job(args, cfg, worker_cmd)
    binaries = Binaries(cfg["launch"]["bin_dir"] or args.bin_dir, script_dir)
    binaries.resolve(*job_needs(cfg["launch"], worker_cmd, cfg["job"].get("replicas", 1),
                                make_keys=security.plan(cfg) == "make" and not args.dry_run,
                                snapshots=bool(cfg["job"].get("snapshot_dir"))))
    if worker_cmd[0] in BINARIES:  # shardps-worker: the one beside the other binaries
        worker_cmd[0] = binaries.path(worker_cmd[0])
    return Launcher(args, cfg, worker_cmd, binaries, t0)


def main(argv, script_dir, t0):
    """Runs one launch; returns the exit status (docs/operations.md).
    `script_dir`: where shardps-launch is (it looks for the binaries
    there); `t0`: when it started (time.monotonic())."""
    args, worker_cmd = parse_args(argv)
    try:
        launcher = prepare(args, worker_cmd, script_dir, t0)
    except LaunchError as e:
        say(str(e), err=True)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C before anything started
        say("SIGINT: stopped before the job started", err=True)
        return 128 + signal.SIGINT

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(signum)
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    rc, report, state = EXIT_FAILED, [], "failed"
    try:
        rc = launcher.run()
        stopped = launcher.stop_requested.is_set() and not launcher.stopped_by_launcher.is_set()
        state = "stopped" if stopped else "completed"
    except LaunchError as e:
        rc, report = EXIT_USAGE, [str(e)]
    except JobFailed as e:
        e.proc.reader.join(timeout=2)  # the last lines it wrote
        rc, report = EXIT_FAILED, failure_lines(e, launcher.run_dir)
    except JobTimeout as e:
        rc, report, state = EXIT_TIMEOUT, [str(e)], "timed out"
    except KeyboardInterrupt as e:
        signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        rc, report, state = 128 + signum, [f"{signal.Signals(signum).name}: the job was stopped"], "stopped"
    finally:
        # Cleanup first, and not to be interrupted (a second SIGHUP or
        # Ctrl-C); reporting after it, so a stalled terminal cannot hold it up.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        launcher.processes.stop_all()
        if launcher.files:
            launcher.files.finish(state, rc, report[0] if report else None)
    print_report(report)
    return rc
