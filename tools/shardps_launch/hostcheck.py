"""Host checks, before anything trains (ssh and Slurm): every host answers,
has the binaries and the run directory, has an address the others can
reach (found there when not given), listens on it, and every host connects
to every other's. Each failure names the host, what failed and what to do;
all of them are one LaunchError (exit 2, nothing started). Also copies
files (keys, the job file) to a host over ssh or srun."""

import os
import queue
import re
import shlex
import subprocess
import threading
import time

from .commands import srun_step, ssh_options
from .errors import LaunchError
from .procs import stop_popen

IPV4 = r"\d+\.\d+\.\d+\.\d+"


def run_parallel(fn, items, timeout=120):
    """fn(item) for every item, each in a thread of its own; returns their
    results in the order of `items` (None for one still running after
    `timeout` s). Each thread writes only its own slot; the caller reads
    them after the joins."""
    results = [None] * len(items)

    def one(i, item):
        results[i] = fn(item)
    threads = [threading.Thread(target=one, args=(i, item), daemon=True) for i, item in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return list(results)


def checks_failed(problems):
    return LaunchError("checks before starting failed:\n  " + "\n  ".join(problems))


def read_port_within(stream, seconds):
    """The port a probe-listen prints, read within `seconds`. A remote login
    shell may print first (a ~/.bashrc's own complaints, on stderr merged
    into this stream): such lines are skipped and returned as the second
    value, to explain a probe that never printed its port."""
    lines = queue.Queue()  # the reader thread's lines, then None at the port or the end

    def read():
        for line in iter(stream.readline, ""):
            lines.put(line.strip())
            if line.strip().isdigit():
                return
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    end, other = time.monotonic() + seconds, []
    while True:
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            return None, other
        if line is None:
            return None, other
        if line.isdigit():
            return line, other
        if line:
            other.append(line)


class Remote:
    """Runs short shell commands on a host: over ssh, or as an srun step.
    No state: any thread."""

    def __init__(self, mode, launch):
        self.mode = mode
        self.ssh_options = ssh_options(launch)

    def ssh(self, host, command, timeout=30, stdin=None):
        """Runs a shell command on `host`; returns (rc, output). A connection
        that fails (ssh exits 255: refused, reset, a banner timeout on a busy
        host) is tried once more."""
        argv = ["ssh"] + self.ssh_options + [host, command]
        for attempt in (1, 2):
            try:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                                   **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}))
            except subprocess.TimeoutExpired:
                return 124, f"no answer within {timeout} s"
            except OSError as e:
                return 127, f"cannot run ssh: {e.strerror}"
            if p.returncode != 255 or attempt == 2:
                return p.returncode, p.stdout.strip()
            time.sleep(0.5)

    def run_on(self, host, command, timeout=30, stdin=None):
        """(rc, output) of a shell command on `host` (ssh, or an srun step),
        with `stdin` (text) as its input when given."""
        if self.mode == "ssh":
            return self.ssh(host, command, timeout, stdin)
        argv = srun_step(host) + ["sh", "-c", command]
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                               **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}))
        except subprocess.TimeoutExpired:
            return 124, f"no answer within {timeout} s"
        except OSError as e:
            return 127, f"cannot run srun: {e.strerror}"
        return p.returncode, p.stdout.strip()

    def copy_to(self, host, text, target, mode600=False):
        """Writes `text` to the file `target` on `host` through the channel
        the job's processes start through (ssh, or an srun step); atomically:
        a temporary file renamed; mode 600 and its folder made when asked."""
        t = shlex.quote(target)
        if mode600:
            command = (f"umask 077 && mkdir -p {shlex.quote(os.path.dirname(target))} && rm -f {t}.tmp && "
                       f"cat > {t}.tmp && mv {t}.tmp {t}")
        else:
            command = f"cat > {t}"
        return self.run_on(host, command, stdin=text)


class HostChecks:
    """The checks of one launch's hosts. Main thread; the per-host checks
    run in threads of their own, each returning its findings (run_parallel)."""

    def __init__(self, remote, launch, run_dir, processes):
        self.remote, self.launch, self.run_dir = remote, launch, run_dir
        self.mode = remote.mode
        self.processes = processes  # ProcessSet: the probes are stopped with the job

    def preflight(self, used, needed):
        """Per host: ssh (or srun) answers, the `needed` paths are
        executables there, the run directory can be made."""
        def check(h):
            # One round trip: ssh answers, then the binaries and the run directory.
            script = (f"echo shardps-ok; for b in {' '.join(shlex.quote(b) for b in needed)}; do "
                      f"test -x \"$b\" || echo \"missing $b\"; done; "
                      f"mkdir -p {shlex.quote(self.run_dir)} 2>&1 | sed 's/^/mkdir /'")
            rc, out = self.remote.run_on(h["name"], script, timeout=20)
            lines = out.splitlines()
            if rc != 0 or "shardps-ok" not in lines:
                why = lines[-1] if lines else "exit " + str(rc)
                if self.mode == "slurm":
                    return [f"node {h['name']}: srun cannot run a step there ({why}); check the allocation "
                            f"(squeue, scontrol show node {h['name']})"]
                return [f"host {h['name']}: ssh does not answer ({why}); check that sshd runs there and "
                        f"that 'ssh -o BatchMode=yes {h['name']} true' works from this machine "
                        f"(keys, --ssh-option)"]
            problems = []
            missing = [l[8:] for l in lines if l.startswith("missing ")]
            if missing:
                problems.append(f"host {h['name']}: missing or not executable there: {', '.join(missing)}; "
                                f"install shardps on every host at the same path, or pass --bin-dir")
            mkdir = [l[6:] for l in lines if l.startswith("mkdir ")]
            if mkdir:
                problems.append(f"host {h['name']}: cannot create the run directory {self.run_dir}: {mkdir[0]}")
            return problems

        problems = [p for found in run_parallel(check, used) for p in found or []]
        if problems:
            raise checks_failed(problems)

    def interface_address(self, host):
        rc, out = self.remote.run_on(host["name"], f"ip -4 -o addr show dev {shlex.quote(self.launch['interface'])}")
        m = re.search(rf"inet ({IPV4})", out)
        if rc != 0 or not m:
            raise LaunchError(f"host {host['name']}: no IPv4 address on interface "
                              f"'{self.launch['interface']}' ({out or 'no output'}); check --interface")
        return m.group(1)

    def coordinator_address(self, host):
        """The coordinator's address: given, the --interface's address on its
        host, --advertise, its name if that is an IP, or `hostname -I` there."""
        if host["address"]:
            return host["address"]
        if self.launch["interface"]:
            return self.interface_address(host)
        if self.launch["advertise"]:
            return self.launch["advertise"]
        name = host["name"].rsplit("@", 1)[-1]
        if re.fullmatch(IPV4, name):
            return name
        rc, out = self.remote.run_on(host["name"], "hostname -I 2>/dev/null || hostname -i")
        addrs = [a for a in out.split() if re.fullmatch(IPV4, a) and not a.startswith("127.")]
        if rc != 0 or not addrs:
            raise LaunchError(f"host {host['name']}: cannot tell its address ({out or 'no output'}); "
                              f"give it with address= or --advertise")
        return addrs[0]

    def remote_address(self, host, coord_addr):
        """What the others dial on `host`: given, the --interface's address
        there, or its address on the route to the coordinator."""
        if host["address"]:
            return host["address"]
        if self.launch["interface"]:
            return self.interface_address(host)
        rc, out = self.remote.run_on(host["name"], f"ip -4 -o route get {shlex.quote(coord_addr)}")
        m = re.search(rf"\bsrc ({IPV4})", out)
        if rc != 0 or not m:
            raise LaunchError(f"host {host['name']}: no route to the coordinator's address {coord_addr} "
                              f"({out or 'no output'}); give the host's address with address=, or --interface")
        return m.group(1)

    def addresses(self, coord_host, used):
        """{host name: the address the others dial there}."""
        addr = {coord_host["name"]: self.coordinator_address(coord_host)}

        def resolve(h):
            try:
                return h["name"], self.remote_address(h, addr[coord_host["name"]]), None
            except LaunchError as e:
                return h["name"], None, str(e)
        others = [h for h in used if h["name"] != coord_host["name"]]
        found = [r for r in run_parallel(resolve, others) if r]
        errors = [e for _, _, e in found if e]
        if errors:
            raise checks_failed(errors)
        addr.update((name, a) for name, a, _ in found)
        return addr

    def reachability(self, used, addr, ctl):
        """Every host listens on its advertised address; every host connects
        to every listener. A failure names both hosts and the address."""
        # Started from this (the main) thread: the parent-death signal fires
        # when the thread that started a child ends.
        started = {}
        for h in used:
            argv = ["ssh"] + self.remote.ssh_options + [h["name"], f"exec {shlex.quote(ctl)} probe-listen "
                                                                    f"{shlex.quote(addr[h['name']])} --seconds 60"]
            if self.mode == "slurm":
                argv = srun_step(h["name"]) + [ctl, "probe-listen", addr[h["name"]], "--seconds", "60"]
            started[h["name"]] = self.processes.start_probe(argv)
        try:
            targets = self._listening(used, addr, started)
            problems = [p for found in run_parallel(lambda h: self._connect_from(h, targets, addr, ctl), used)
                        for p in found or []]
            if problems:
                raise checks_failed(sorted(set(problems)))
        finally:
            for p in started.values():
                stop_popen(p, self.mode == "slurm")

    def _listening(self, used, addr, started):
        """{host name: ADDR:PORT its probe listens on}; raises naming each
        host whose probe did not listen within 30 s."""
        def listen(h):
            port, other = read_port_within(started[h["name"]].stdout, 30)
            if port is None:
                why = "; ".join(other[-3:]) or "no answer"
                return None, (f"host {h['name']}: cannot listen on its address {addr[h['name']]} "
                              f"({why}); is it this host's address? give the right one "
                              f"with address= or --interface")
            return (h["name"], f"{addr[h['name']]}:{port}"), None
        found = [r for r in run_parallel(listen, used) if r]
        problems = [why for _, why in found if why]
        if problems:
            raise checks_failed(problems)
        return dict(t for t, _ in found if t)

    def _connect_from(self, h, targets, addr, ctl):
        """What fails when host `h` connects to every listener."""
        rc, out = self.remote.run_on(h["name"], f"{shlex.quote(ctl)} probe-connect --timeout-ms 5000 " +
                                     " ".join(targets.values()), timeout=60)
        problems = []
        for line in out.splitlines():
            if line.startswith("fail "):
                dest = next((n for n, v in targets.items() if line[5:].startswith(v)), "?")
                problems.append(f"host {dest}: its address {addr.get(dest, '?')} cannot be reached from "
                                f"host {h['name']} ({line[5:]}); give each host an address the others "
                                f"can reach (address= in the hosts file, or --interface)")
        if rc != 0 and not any(l.startswith("fail ") for l in out.splitlines()):
            problems.append(f"host {h['name']}: probe failed ({out})")
        return problems
