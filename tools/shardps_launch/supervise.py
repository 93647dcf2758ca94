"""Process supervision, the decisions: while the job runs, what to do when
one of its processes ends -- the job is done, a worker is started again or
its work left to the others, the job is rolled back to its newest snapshot
(a server died, --restart-servers), a dead coordinator is started again
(--restart-coordinator), or the job fails."""

import json
import os
import re
import subprocess
import time

from .commands import GRACE_SEC, on_endpoint
from .errors import JobFailed, JobTimeout, LaunchError
from .output import report, say
from .procs import terminate


def stop_watcher(event):
    """A coordinator watcher: sets `event` at its 'stop requested' line (shardps-ctl stop)."""
    return lambda line: " stop requested" in line and event.set()


def ended_before_joining(others, stop_requested):
    """A stop (shardps-ctl stop or this launcher's) ended the coordinator and
    every server (`others`) cleanly while workers still run: a stop
    completes only once no joined worker is live, so those never joined —
    started again after a rollback, they were still starting when the stop
    came (the coordinator, gone, cannot tell them the job is stopping)."""
    coords = [p for p in others if p.role == "coordinator"]
    return (stop_requested.is_set() and bool(coords) and coords[-1].rc == 0 and
            all(p.poll() is not None and (p.rc == 0 or p.failed_over) for p in others))


def finish_stopped(workers, failures):
    """The job ended while workers (rank -> process) were still starting:
    they are stopped; 0."""
    late = [p for p in workers.values() if p.poll() is None]
    for p in late:
        p.handled = True  # (not a failure to restart or report)
        report(p, f"{p.name} on {p.host} had not joined when the job ended (it was starting again): stopping it")
    terminate(late, GRACE_SEC)
    for line in failures:
        say(f"on the way: {line}")
    say("the job stopped on request")
    return 0


def watched(procs):
    """The coordinators and servers being watched: not workers, not etcd
    members (supervised apart: one lost is not the job's end), not the ones
    whose end was dealt with."""
    return [q for q in procs if q.role not in ("worker", "etcd") and not q.handled]


def final_snapshot(sup, timeout):
    """A job with a snapshot directory that ended on its own (Supervisor
    `sup`, every worker exited): the trained model is written before the
    servers go. The coordinator is asked to stop (as shardps-ctl stop
    does): every worker left, so it takes the final snapshot and then ends
    every server itself. Returns what to say of it ("" when there is none
    to take)."""
    coords = [p for p in sup.processes.procs if p.role == "coordinator"]
    if (not sup.job.get("snapshot_dir") or sup.stop_requested.is_set() or not sup.coordinator or
            all(c.poll() is not None for c in coords) or not sup.binaries.optional("shardps-ctl")):
        return ""
    say("every worker finished: taking the final snapshot")
    sup.stopped_by_launcher.set()  # (the job completed: this stop is not a user's)
    out, rc = sup.ctl("stop", sup.coordinator, timeout=min(600, max(60, timeout)))
    if rc != 0:
        last = out.splitlines()[-1] if out else f"shardps-ctl stop exited {rc}"
        live = [c for c in coords if c.poll() is None] or coords
        raise JobFailed(live[-1], f"the job's final snapshot failed: {last.removeprefix('shardps-ctl: stop: ')}")
    m = re.search(r"(\S*snap-\d+)", out)
    return f"its final snapshot {m.group(1)}" if m else "its final snapshot"


def coordinator_lost(sup, p):
    """Supervisor `sup`: a coordinator of a job with standbys died: if it led, a standby
    takes the lead once its lease lapses (the job's state is in etcd) and
    the job goes on. It is started again as a standby (at most
    --max-restarts times), so that the job keeps its standbys; with no
    coordinator left and none started again, the job fails."""
    p.handled = True
    p.reader.join(timeout=2)
    what = f"{p.name} on {p.host} {p.describe_exit()} at {sup.elapsed():.1f} s"
    left = [q for q in sup.others if q.role == "coordinator" and q is not p and q.poll() is None]
    if sup.stop_requested.is_set():  # (the stop is in the state: a standby finishes it)
        if not left:
            raise JobFailed(p, f"{what} while the job was stopping, and no coordinator is left")
        report(p, f"{what} while the job was stopping: a standby finishes the stop if it led")
        sup.failures.append(f"{what}: a standby finished the stop if it led")
    elif p.incarnation < sup.launch["max_restarts"]:
        argv = p.spec[0] if "--standby" in p.spec[0] else p.spec[0] + ["--standby"]
        report(p, f"{what}: {'a standby leads if it led' if left else 'no coordinator left'}; starting it "
                  f"again as a standby (restart {p.incarnation + 1} of at most {sup.launch['max_restarts']})")
        q = sup.processes.start_again(p, argv, watchers=[stop_watcher(sup.stop_requested)])
        q.endpoint = p.endpoint
        sup.failures.append(f"{what}: a standby took over if it led; started again as a standby")
    elif left:
        report(p, f"{what}: a standby leads if it led; not started again (--max-restarts "
                  f"{sup.launch['max_restarts']} reached)")
        sup.failures.append(f"{what}: a standby took over if it led")
    else:
        raise JobFailed(p, f"{what}, and no coordinator is left (after {p.incarnation} restarts, the most "
                           f"--max-restarts allows)")
    sup.others = watched(sup.processes.procs)
    sup.files.note(sup.failures[-1])


def standby_signalled(p):
    """A standby that exited 0 because a signal stopped it while it waited
    (not because the job ended): lost, as a killed one is."""
    p.reader.join(timeout=2)
    return p.role == "coordinator" and any("stopped while waiting to lead" in line for line in p.last_lines())


def check_etcd(sup):
    """Supervisor `sup`, --etcd local: a member that ended is said once; the cluster goes
    on with a majority (the coordinators say what they wait for if it
    has none)."""
    for p in sup.etcd:
        if p.handled or p.poll() is None:
            continue
        p.handled = True
        p.reader.join(timeout=2)
        up = sum(1 for q in sup.etcd if q.poll() is None)
        what = f"{p.name} on {p.host} {p.describe_exit()} at {sup.elapsed():.1f} s"
        report(p, f"{what}: {up} of {len(sup.etcd)} etcd members left" +
                  ("; the cluster goes on" if 2 * up > len(sup.etcd) else
                   "; no majority: the coordinators wait for etcd (data keeps flowing)"))
        sup.failures.append(f"{what}: {up} of {len(sup.etcd)} etcd members left")
        sup.files.note(sup.failures[-1])


def drained(sup, p):
    """Supervisor `sup`: a server that exited 0 while the job runs because it was drained
    (shardps-ctl drain-server): its groups are held by other servers;
    the job goes on."""
    p.reader.join(timeout=2)
    if not any("drained" in line for line in p.last_lines()):
        return False
    p.failed_over = True
    report(p, f"{p.name} on {p.host} was drained (its groups are held by other servers) and exited 0 at "
              f"{sup.elapsed():.1f} s; the job goes on")
    sup.failures.append(f"{p.name} drained at {sup.elapsed():.1f} s")
    sup.files.note(sup.failures[-1])
    return True


class Supervisor:
    """Watches a started job until it ends. Main thread only (the
    stop_requested event is set by the coordinator's reader thread)."""

    def __init__(self, launch, job, processes, binaries, keys, coordinator, stop_requested, t0, files, stopped_by_launcher,
                 standbys=0):
        self.launch, self.job = launch, job
        self.processes = processes  # ProcessSet
        self.binaries = binaries  # Binaries: shardps-ctl
        self.keys = keys  # the job's key directory, "" without security
        self.coordinator = coordinator  # its endpoint (with standbys: every coordinator's, comma-separated)
        self.standbys = standbys  # [coordinator] standbys: a dead coordinator is not the job's end
        self.stop_requested, self.stopped_by_launcher = stop_requested, stopped_by_launcher  # Events: a stop; ours
        self.t0 = t0
        self.files = files  # RunDirFiles: job.json and the Prometheus targets, kept current
        procs = processes.procs
        self.workers = {p.rank: p for p in procs if p.role == "worker"}  # rank -> its newest process
        self.others = watched(procs)  # the coordinators and servers being watched
        self.etcd = [p for p in procs if p.role == "etcd"]  # --etcd local: its members
        self.quiet_since = None  # a server or the coordinator ended cleanly (shardps-ctl stop)
        self.failures = []  # what failed and what was done about it, for the end
        self.rollbacks = 0

    def elapsed(self):
        return time.monotonic() - self.t0

    def run(self):
        """Returns 0 when the job is done; raises JobFailed or JobTimeout."""
        timeout = self.launch["timeout_sec"]
        deadline = self.t0 + timeout
        reported_first = False
        while True:
            if not reported_first:
                firsts = [t for t in (p.first_line_at() for p in self.workers.values()) if t]
                if firsts:
                    say(f"first worker output {min(firsts) - self.t0:.2f} s after start")
                    reported_first = True
            # Servers and the coordinator first: a worker that fails because
            # a server died must not take the blame.
            self.check_others()
            check_etcd(self)
            self.check_workers()
            if all(p.poll() is not None for p in self.workers.values()):
                return self.finish(deadline, timeout)
            if self.quiet_since and time.monotonic() - self.quiet_since > 30:
                if ended_before_joining(self.others, self.stop_requested):
                    return finish_stopped(self.workers, self.failures)
                ended = [p for p in self.others if p.poll() is not None]
                raise JobFailed(ended[0], f"{ended[0].name} on {ended[0].host} exited while workers still ran")
            if time.monotonic() > deadline:
                raise JobTimeout(f"workers still running after {timeout} s (--timeout): stopping")
            self.files.update()
            time.sleep(0.2)

    def check_others(self):
        """The coordinator and the servers: one that ended is started again,
        rolls the job back, fails the job, or (exit 0) starts the quiet
        period. After a restart or rollback the rest wait for the next round."""
        for p in list(self.others):
            if p.poll() is None or p.failed_over:
                continue
            if p.rc != 0 and p.role == "server" and self.job.get("replicas", 1) > 1 and not self.stop_requested.is_set():
                if self.fail_over(p):
                    continue
            if p.rc == 0 and p.role == "server" and not self.stop_requested.is_set() and drained(self, p):
                continue
            if p.role == "coordinator" and self.standbys and (p.rc != 0 or standby_signalled(p)):
                coordinator_lost(self, p)  # (a standby takes over; during a stop too)
                return
            if (p.rc != 0 and p.role == "coordinator" and self.launch["restart_coordinator"] and not p.handled
                    and not self.stop_requested.is_set()):
                self.restart_coordinator(p)
                return
            if p.rc != 0 and p.role == "server" and self.launch["restart_servers"] and not p.handled:
                what = f"{p.name} on {p.host} {p.describe_exit()} at {self.elapsed():.1f} s"
                if self.rollbacks >= self.launch["max_restarts"]:
                    raise JobFailed(p, f"{p.name} on {p.host} {p.describe_exit()} (after {self.rollbacks} "
                                       f"rollbacks, the most --max-restarts allows)")
                self.rollbacks += 1
                snap = self.roll_back(p, what, self.rollbacks)
                procs = self.processes.procs
                self.others = watched(procs)
                self.workers = {q.rank: q for q in procs if q.role == "worker" and not q.handled}
                self.failures.append(f"{what}: rolled back to {snap}, every server and worker started again")
                self.files.note(self.failures[-1], rollback=True)
                self.files.update("running")
                return
            if p.rc != 0:
                raise JobFailed(p, f"{p.name} on {p.host} {p.describe_exit()}")
            self.quiet_since = self.quiet_since or time.monotonic()

    def fail_over(self, p):
        """A server died in a job with replicas: the coordinator is told at
        once (shardps-ctl declare-dead) and each group it served goes to its
        backup; nothing is restarted and nothing rolls back. False (after
        saying why) when that cannot be: a group lost its last copy; the
        rollback or the failure below then follows."""
        what = f"{p.name} on {p.host} {p.describe_exit()} at {self.elapsed():.1f} s"
        out, rc = self.ctl("declare-dead", self.coordinator, str(p.rank), timeout=30)
        if rc != 0:
            why = (out.splitlines()[-1] if out else f"shardps-ctl declare-dead exited {rc}").removeprefix(
                "shardps-ctl: declare-dead: ")
            report(p, f"{what}: no fail-over: {why}")
            return False
        p.failed_over = True
        if self.launch["restart_servers"] and p.incarnation < self.launch["max_restarts"]:
            # A replacement under its rank: the coordinator fills it with
            # copies of the groups short of one while the job runs.
            report(p, f"{what}: {out or 'its groups are served by their backups'}; starting a replacement "
                      f"(restart {p.incarnation + 1} of at most {self.launch['max_restarts']}), filled with copies "
                      f"while the job goes on")
            self.others.append(self.processes.start_again(p))
            self.failures.append(f"{what}: failed over to the backups of its groups, a replacement started")
        else:
            report(p, f"{what}: {out or 'its groups are served by their backups'}; the job goes on (nothing restarted)")
            self.failures.append(f"{what}: failed over to the backups of its groups")
        self.files.note(self.failures[-1])
        return True

    def restart_coordinator(self, p):
        what = f"the coordinator on {p.host} {p.describe_exit()} at {self.elapsed():.1f} s"
        if p.incarnation >= self.launch["max_restarts"]:
            raise JobFailed(p, f"the coordinator on {p.host} {p.describe_exit()} (after "
                               f"{p.incarnation} restarts, the most --max-restarts allows)")
        p.handled = True
        report(p, f"{what}: starting it again on {self.coordinator} with its saved state "
                  f"({self.job['state_dir'] or 'in etcd'}); the job goes on")
        argv = on_endpoint(p.spec[0], self.coordinator)
        if (self.launch["etcd"] or str(self.job.get("state_dir", "")).startswith("etcd://")) and "--standby" not in argv:
            argv.append("--standby")  # (waits out etcd instead of failing at once; the lease of the dead one too)
        q = self.processes.start_again(p, argv, watchers=[stop_watcher(self.stop_requested)])
        q.endpoint = p.endpoint
        self.others = watched(self.processes.procs)
        self.failures.append(f"{what}: started again, the job resumed")
        self.files.note(self.failures[-1])

    def check_workers(self):
        """A worker that failed is started again (--restart-workers), or,
        killed while others run, leaves its work to them; else the job fails."""
        for rank, p in list(self.workers.items()):
            if p.poll() is None or p.rc == 0 or p.handled:
                continue
            p.handled = True
            p.reader.join(timeout=2)
            what = f"{p.name} on {p.host} {p.describe_exit()} at {self.elapsed():.1f} s"
            others_run = any(q.poll() is None for q in self.workers.values() if q is not p)
            # Exit status 2 (usage) and 3 (accuracy below --min-accuracy)
            # are the job's own verdicts: never started again.
            if (self.launch["restart_workers"] and p.rc not in (2, 3) and
                    p.incarnation < self.launch["max_restarts"] and not self.stop_requested.is_set()):
                report(p, f"{what}: starting it again (restart {p.incarnation + 1} of at most "
                          f"{self.launch['max_restarts']}); it rejoins the running job")
                self.workers[rank] = self.processes.start_again(p)
                self.failures.append(f"{what}: started again")
                self.files.note(self.failures[-1])
            elif p.killed() and others_run:
                report(p, f"{what}: the job goes on; the coordinator hands its unfinished batches to the "
                          f"other workers")
                self.failures.append(f"{what}: its work went to the other workers")
                self.files.note(self.failures[-1])
            else:
                raise JobFailed(p, f"{p.name} on {p.host} {p.describe_exit()}")

    def finish(self, deadline, timeout):
        """Every worker ended: the job completed (0) unless none finished;
        after a stop, waits for the coordinator and servers to end."""
        workers = self.workers
        done = [p for p in workers.values() if p.rc == 0]
        if not done:  # (every failure above was handled: the last ones died together)
            last = max(workers.values(), key=lambda q: q.rank)
            raise JobFailed(last, f"every worker failed; {last.name} on {last.host} {last.describe_exit()}")
        say(f"all {len(workers)} workers finished" if len(done) == len(workers) else
            f"{len(done)} of {len(workers)} workers finished, the job completed")
        for line in self.failures:
            say(f"on the way: {line}")
        final = final_snapshot(self, timeout)
        if final or self.stop_requested.is_set() or self.coordinator_stopping():
            # A stop: the coordinator takes the final snapshot and ends every server itself.
            while any(p.poll() is None for p in self.others):
                if time.monotonic() > deadline:
                    raise JobTimeout(f"the job was stopping but its servers or coordinators still ran after {timeout} s")
                time.sleep(0.1)
            # (with standbys a coordinator killed during the stop is not a
            # failure when another finished it)
            done = self.standbys and any(p.role == "coordinator" and p.rc == 0 for p in self.others)
            failed = [p for p in self.others if p.rc != 0 and not p.failed_over and
                      not (done and p.role == "coordinator")]
            if failed:
                raise JobFailed(failed[0], f"{failed[0].name} on {failed[0].host} {failed[0].describe_exit()}")
            say("the job stopped on request" if not final else f"the job ended with {final}")
        return 0

    def ctl(self, *args, timeout):
        """shardps-ctl ARGS with the admin key (if any), on this machine:
        (its output, its exit status); a ctl that does not answer within
        `timeout` + 30 s, or cannot run, is exit status 1 saying so."""
        ctl = self.binaries.path("shardps-ctl")  # resolved before the job started (binaries.job_needs)
        try:
            r = subprocess.run([ctl, *self.key("admin.key"), *args, "--timeout-sec", str(timeout)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                               timeout=timeout + 30)
            return r.stdout.strip(), r.returncode
        except subprocess.TimeoutExpired:
            return f"shardps-ctl {args[0]} did not answer within {timeout + 30} s", 1
        except OSError as e:
            return f"cannot run {ctl}: {e.strerror}", 1

    def key(self, name):
        return ["--key", os.path.join(self.keys, name)] if self.keys else []

    def roll_back(self, failed, what, n):
        """A server died: every server and worker is stopped, the coordinator
        goes back to the newest complete snapshot, and they all start again
        from it (the servers reload it, the workers resume at its clock and
        data position). Returns the snapshot's directory."""
        report(failed, f"{what}: rolling the job back to its newest complete snapshot (rollback {n} of at most "
                       f"{self.launch['max_restarts']})")
        self.files.update("rolling back")
        # The newest process of every server and worker rank, whatever became
        # of it: the job starts again from the snapshot with all of them.
        victims = self.processes.newest(("server", "worker"))
        for p in victims:
            p.handled = True
        terminate(victims, GRACE_SEC, exited_too=False)  # gone before their ports are wanted again
        out, rc = self.ctl("rollback", self.coordinator, timeout=60)
        if rc != 0:
            why = out.splitlines()[-1] if out else f"shardps-ctl rollback exited {rc}"
            raise JobFailed(failed, f"{what}, and the job cannot be rolled back: {why.removeprefix('shardps-ctl: rollback: ')}")
        m = re.search(r"rolled back to (\S+) \(clock (-?\d+)\)", out)
        snap = f"{m.group(1)} (clock {m.group(2)})" if m else out
        say(f"rolled back to {snap}: starting every server and worker again", err=True)
        for p in sorted(victims, key=lambda q: (q.role != "server", q.rank)):
            self.processes.start_again(p)
        return snap

    def coordinator_stopping(self):
        """Whether a stop was asked (shardps-ctl stop): the log line may still
        be on its way when the workers' exits are seen. Without a
        shardps-ctl here, only the log line tells."""
        coords = [p for p in self.processes.procs if p.role == "coordinator"]
        ctl = self.binaries.optional("shardps-ctl")
        if not self.coordinator or all(c.poll() is not None for c in coords) or not ctl:
            return False
        try:
            p = subprocess.run([ctl, *self.key("observer.key"), "status", self.coordinator, "--json", "--timeout-sec",
                                "5"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                               text=True, timeout=10)
            return p.returncode == 0 and json.loads(p.stdout).get("stopping", False)
        except (OSError, ValueError, subprocess.TimeoutExpired, LaunchError):
            return False
