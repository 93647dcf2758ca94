"""Placement: the hosts of a job (this machine, a hosts file or [launch]
hosts, the nodes of a Slurm allocation) and which of them runs the
coordinator, each server rank and each worker rank. Pure functions of
their inputs (files and the environment are read, nothing is started).

A host is a dict: name, address ("" when the launcher finds it),
coordinator (bool), servers and workers (-1: no count given)."""

import collections
import re
import shutil

from .errors import LaunchError

Placement = collections.namedtuple("Placement", "coordinator servers workers")
Placement.__doc__ = "The coordinator's host, the host of each server rank, and of each worker rank."


def local_host():
    return {"name": "localhost", "address": "127.0.0.1", "coordinator": True, "servers": -1, "workers": -1}


def parse_hosts_file(path):
    """One host a line: NAME [address=ADDR] [coordinator] [servers=N] [workers=N]; # comments."""
    hosts = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise LaunchError(f"cannot read hosts file '{path}': {e.strerror}")
    except UnicodeDecodeError as e:
        raise LaunchError(f"hosts file '{path}' is not text (UTF-8): {e.reason} at byte {e.start}")
    for n, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        h = {"name": words[0], "address": "", "coordinator": False, "servers": -1, "workers": -1}
        for w in words[1:]:
            key, _, val = w.partition("=")
            if key == "coordinator" and not val:
                h["coordinator"] = True
            elif key == "address" and val:
                h["address"] = val
            elif key in ("servers", "workers") and val.isdigit():
                h[key] = int(val)
            else:
                raise LaunchError(f"{path}:{n}: '{w}' is not one of address=ADDR, coordinator, servers=N, workers=N")
        hosts.append(h)
    if not hosts:
        raise LaunchError(f"hosts file '{path}' lists no host")
    return hosts


def expand_hostlist(spec):
    """Slurm's compact node lists: "n[1-3,7],gpu[01-02]-a" -> n1 n2 n3 n7
    gpu01-a gpu02-a (what `scontrol show hostnames` prints, without a
    controller to ask). Raises ValueError on a malformed list."""
    items, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            raise ValueError("unbalanced ']'")
        cur += ch
    if depth:
        raise ValueError("unbalanced '['")
    items.append(cur)

    def expand(item):
        m = re.match(r"([^\[]*)\[([^\]]*)\](.*)$", item)
        if not m:
            return [item] if item else []
        head, ranges, tail = m.groups()
        out = []
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"'{r}' is not N or N-M")
            for n in range(int(lo), int(hi or lo) + 1):
                out += [head + str(n).zfill(len(lo)) + rest for rest in expand(tail) or [""]]
        return out

    names = []
    for item in items:
        names += expand(item.strip())
    return names


def slurm_hosts(environ):
    """The nodes of the Slurm allocation the launcher runs in (`environ`:
    its environment), as hosts."""
    if not environ.get("SLURM_JOB_ID"):
        raise LaunchError("--slurm runs inside a Slurm allocation (salloc or sbatch): SLURM_JOB_ID is not set")
    if not shutil.which("srun"):
        raise LaunchError("--slurm needs srun on PATH")
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", "")
    try:
        names = expand_hostlist(nodelist)
    except ValueError as e:
        raise LaunchError(f"cannot read the allocation's node list SLURM_JOB_NODELIST='{nodelist}': {e}")
    if not names:
        raise LaunchError("the allocation lists no node (SLURM_JOB_NODELIST is empty)")
    return [{"name": n, "address": "", "coordinator": False, "servers": -1, "workers": -1} for n in names]


def job_hosts(mode, hosts_file, launch_hosts, environ):
    """The hosts a job of `mode` may use: this machine (local), the hosts
    file or else [launch] hosts (ssh), the allocation's nodes (slurm)."""
    if mode == "local":
        return [local_host()]
    if mode == "ssh":
        hosts = parse_hosts_file(hosts_file) if hosts_file else launch_hosts
        if not hosts:
            raise LaunchError("ssh mode needs hosts: --hosts FILE or [launch] hosts = [...]")
        return hosts
    return slurm_hosts(environ)


def place(hosts, n_servers, n_workers):
    """Coordinator on the host marked coordinator (else the first); servers
    and workers as the hosts ask, the rest spread round-robin over the hosts
    that gave no count. Returns a Placement (hosts are the dicts of `hosts`)."""
    coord = next((h for h in hosts if h["coordinator"]), hosts[0])

    def spread(key, total):
        fixed = [h for h in hosts if h[key] >= 0]
        out = [h for h in fixed for _ in range(h[key])]
        free = [h for h in hosts if h[key] < 0]
        if len(out) > total:
            raise LaunchError(f"the hosts ask for {len(out)} {key}, the job has {total}")
        if len(out) < total and not free:
            raise LaunchError(f"the hosts take {len(out)} {key} but the job has {total}: give a host more, "
                              f"or leave its count out to spread the rest")
        i = 0
        while len(out) < total:
            out.append(free[i % len(free)])
            i += 1
        return out

    return Placement(coord, spread("servers", n_servers), spread("workers", n_workers))


def used_hosts(placement):
    """The hosts that run something, each once: the coordinator's first,
    then in the order of the server and worker ranks."""
    used = []
    for h in [placement.coordinator] + placement.servers + placement.workers:
        if h not in used:
            used.append(h)
    return used


def dry_run_addresses(used, coord_host, advertise):
    """--dry-run over ssh or Slurm: the addresses as known without asking
    the hosts (address=, --advertise for the coordinator), else a
    placeholder naming the host."""
    return {h["name"]: h["address"] or (advertise if h is coord_host else "") or f"<address of {h['name']}>"
            for h in used}
