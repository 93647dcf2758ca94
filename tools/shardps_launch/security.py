"""Security of one launch (docs/security.md): where the job's keys come
from, and the one line that says so.

  given  --keys DIR / [security] keys: the user's key directory.
  make   a job across hosts (ssh, Slurm) with no keys given, or [security]
         enabled = true: the launcher makes the job's keys itself, as
         `shardps-keygen RUN_DIR/job-keys` would (mode 700), and turns CURVE
         on; each host gets only the keys its processes need (launcher.py).
  off    a local job with no keys (every process on this machine), or
         --no-security / [security] enabled = false: no CURVE; across hosts
         with a warning naming what is exposed."""

import os
import shlex
import shutil
import subprocess

from .errors import LaunchError

KEY_FILES = ("server.key", "worker.key", "observer.key", "access")
MADE_DIR = "job-keys"  # in the run directory, on this machine


def plan(cfg):
    """'given', 'make' or 'off' for the job `cfg` (as --print-config says it)."""
    sec = cfg.get("security", {})
    if sec.get("keys"):
        return "given"
    enabled = sec.get("enabled")
    if enabled is False:
        return "off"
    return "make" if enabled is True or cfg["launch"]["mode"] != "local" else "off"


def check_keys(keys):
    """The job's key directory, absolute; every key a process gets must be readable."""
    keys = os.path.abspath(keys)
    for f in KEY_FILES:
        path = os.path.join(keys, f)
        if not os.access(path, os.R_OK):
            raise LaunchError(f"security: cannot read '{path}' (make the job's keys with: shardps-keygen {keys})")
    return keys


def make_keys(keygen, run_dir):
    """Makes the job's keys with `keygen` (shardps-keygen) in
    RUN_DIR/job-keys, mode 700 (a reused run directory's old keys are
    replaced: they were another job's). Returns the directory."""
    keys = os.path.join(run_dir, MADE_DIR)
    shutil.rmtree(keys, ignore_errors=True)
    try:
        p = subprocess.run([keygen, keys], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LaunchError(f"security: cannot make the job's keys with {keygen}: {e}")
    if p.returncode != 0:
        raise LaunchError(f"security: {keygen} {keys} failed: {p.stdout.strip()}")
    return check_keys(keys)


def read_key(keys, name):
    """The text of key file `name` of the directory `keys`, ending in a newline."""
    try:
        with open(os.path.join(keys, name)) as f:
            text = f.read()
    except OSError as e:
        raise LaunchError(f"security: cannot read '{os.path.join(keys, name)}': {e.strerror}")
    return text if text.endswith("\n") else text + "\n"


def copy_script(target_dir, files, tag):
    """A POSIX shell command that writes `files` ([(name, text)], each text
    whole lines) into `target_dir` (made if need be) from its standard
    input, the texts one after the other: mode 600, each through a
    temporary file (NAME.tmp-TAG: hosts sharing the folder each write
    their own) renamed. Secrets travel on stdin, never on a command line."""
    d = shlex.quote(target_dir)
    parts = [f"umask 077 && mkdir -p {d}"]
    for name, text in files:
        tmp = shlex.quote(os.path.join(target_dir, f"{name}.tmp-{tag}"))
        parts.append(f"{{ i=0; while [ $i -lt {text.count(chr(10))} ]; do IFS= read -r l || exit 1; "
                     f"printf '%s\\n' \"$l\"; i=$((i + 1)); done; }} > {tmp}")
    for name, _ in files:
        tmp = shlex.quote(os.path.join(target_dir, f"{name}.tmp-{tag}"))
        parts.append(f"mv {tmp} {shlex.quote(os.path.join(target_dir, name))}")
    return " && ".join(parts)


def start_line(how, keys, mode, run_dir, dry_run=False):
    """What the launcher says at the start about security, or None (a local
    job without keys: as ever, nothing to say)."""
    made = "to be made" if dry_run else "made"
    where = (f"copied into {run_dir}/keys on each host (mode 600): server.key and access where the coordinator or a "
             f"server runs, worker.key where a worker runs" if mode != "local" else "every process reads its key there")
    if how == "make":
        return (f"security on: CURVE with the job's own keys, {made} in {keys} (mode 700), {where}; "
                f"shardps-ctl --run-dir {run_dir} uses them (--no-security turns this off)")
    if how == "given":
        return f"security on: CURVE with the keys in {keys}, {where}"
    return None


def exposed_warning(hosts):
    """The warning for security turned off in a job across hosts."""
    return (f"WARNING: security is off (--no-security or [security] enabled = false) in a job across hosts "
            f"({', '.join(hosts)}): anyone who can reach the job's ports there can read the whole model (pull), "
            f"push gradients into it, register as a server or worker, and stop or snapshot the job, with no key; "
            f"and every parameter and gradient crosses the network unencrypted")
