"""Where the shardps binaries are, and which ones a job needs: all of them
are found before anything starts, so that a missing one is a message at
the start naming it and where the launcher looked, never a failure in the
middle of a job (a rollback that cannot find shardps-ctl).

Search order: --bin-dir / [launch] bin_dir (an installed bin directory or a
Meson build directory: DIR/NAME, then DIR/<folder>/NAME), else the source
tree's build/ (when the launcher runs from a source tree), next to the
launcher (installed), then PATH."""

import os
import shutil

from .errors import LaunchError

BINARIES = {  # name -> its folder in a build tree
    "shardps-coordinator": "server", "shardps-server": "server",
    "shardps-ctl": "tools", "shardps-worker": "worker", "shardps-keygen": "tools",
}


class Binaries:
    """The paths of the shardps binaries for one launch. Main thread only."""

    def __init__(self, bin_dir, script_dir):
        self.bin_dir = bin_dir  # --bin-dir or [launch] bin_dir; "" or None: search
        self.script_dir = script_dir  # where shardps-launch itself is
        self.src_root = os.path.dirname(script_dir)
        self._paths = {}  # name -> path, filled by resolve()

    def candidates(self, name):
        """The paths tried for `name` here, in order (PATH comes after them
        when there is no --bin-dir)."""
        if self.bin_dir:
            d = os.path.abspath(self.bin_dir)
            out = [os.path.join(d, name), os.path.join(d, BINARIES.get(name, ""), name)]
        else:
            out = [os.path.join(self.script_dir, name)]
            if os.path.exists(os.path.join(self.src_root, "meson.build")):  # a source tree: its build/ first
                out.insert(0, os.path.join(self.src_root, "build", BINARIES.get(name, ""), name))
        return list(dict.fromkeys(out))

    def locate(self, name):
        """The executable `name` on this machine, or None."""
        for c in self.candidates(name):
            if os.access(c, os.X_OK) and not os.path.isdir(c):
                return c
        return None if self.bin_dir else shutil.which(name)

    def where_looked(self, name):
        places = ", ".join(self.candidates(name))
        if self.bin_dir:
            return f"{places} (--bin-dir is an installed bin directory or a build directory)"
        return f"{places}, PATH (build shardps first, or pass --bin-dir)"

    def resolve(self, needs, remote=()):
        """Finds every binary of `needs` ({name: what the job needs it for});
        raises LaunchError naming each one missing, why it is needed and
        where the launcher looked. Names in `remote` run only on other hosts
        (ssh, Slurm), whose checks before starting look for them there: with
        a --bin-dir, one not found on this machine is taken as
        --bin-dir/NAME. ENSURES: path(name) for every name of `needs`."""
        missing = []
        for name, why in needs.items():
            path = self.locate(name)
            if path is None and name in remote and self.bin_dir:
                path = os.path.join(os.path.abspath(self.bin_dir), name)
            if path is None:
                missing.append(f"{name} ({why}): looked at {self.where_looked(name)}")
            else:
                self._paths[name] = path
        if len(missing) == 1:
            raise LaunchError(f"cannot find {missing[0]}")
        if missing:
            raise LaunchError("cannot find the binaries this job needs:\n  " + "\n  ".join(missing))

    def path(self, name):
        """REQUIRES: `name` was resolved."""
        return self._paths[name]

    def optional(self, name):
        """The path of `name` if there is one here (for what can do without it), else None."""
        return self._paths.get(name) or self.locate(name)


def job_needs(launch, worker_cmd, replicas=1, make_keys=False, snapshots=False):
    """What the job of `launch` ([launch] of the job) needs, as
    ({name: why}, the names that run only on other hosts). The coordinator
    and the servers always; shardps-ctl for --restart-servers (the rollback
    runs it on this machine) and for the host checks over ssh and Slurm;
    the worker command when it names a shardps binary; shardps-keygen when
    the launcher makes the job's keys (`make_keys`, on this machine only);
    shardps-ctl for a job with a snapshot directory (`snapshots`: its end
    runs shardps-ctl stop here, for the final snapshot)."""
    remote = launch["mode"] != "local"
    needs = {"shardps-coordinator": "it runs the job", "shardps-server": "the parameter servers"}
    if remote:
        needs["shardps-ctl"] = "the checks before starting run shardps-ctl probe-listen and probe-connect on each host"
    if snapshots:
        needs["shardps-ctl"] = "a snapshot directory: the job's end runs shardps-ctl stop on this machine (the final snapshot)"
    if launch["restart_servers"]:
        needs["shardps-ctl"] = "--restart-servers: the rollback runs shardps-ctl rollback on this machine"
    if replicas > 1:
        needs["shardps-ctl"] = "replicas: a dead server is failed over with shardps-ctl declare-dead on this machine"
    if worker_cmd and worker_cmd[0] in BINARIES:
        needs[worker_cmd[0]] = "the worker command"
    if make_keys:
        needs["shardps-keygen"] = "security: the launcher makes the job's keys (--no-security turns it off)"
    elsewhere = set(needs) - {"shardps-coordinator", "shardps-keygen"} if remote else set()
    if launch["restart_servers"] or replicas > 1 or snapshots:
        elsewhere.discard("shardps-ctl")
    return needs, elsewhere


def check_worker_command(cmd, env_path):
    """Local mode: raises LaunchError unless the worker command's program
    `cmd` can be run on this machine (a path: an executable file there;
    a name: on `env_path`, the PATH the workers get). A program with
    {rank} or another placeholder in its name is left to the start."""
    if "{" in cmd:
        return
    if "/" in cmd:
        if not os.path.exists(cmd):
            raise LaunchError(f"the worker command cannot be run: '{cmd}' does not exist")
        if os.path.isdir(cmd) or not os.access(cmd, os.X_OK):
            raise LaunchError(f"the worker command cannot be run: '{cmd}' is not an executable file")
    elif shutil.which(cmd, path=env_path) is None:
        raise LaunchError(f"the worker command cannot be run: '{cmd}' is not found on PATH")
