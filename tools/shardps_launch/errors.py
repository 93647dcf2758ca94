"""The ways a launch ends early, and the launcher's exit statuses
(docs/operations.md, "Output and exit status")."""

EXIT_OK = 0
EXIT_FAILED = 1   # a process of the job failed (JobFailed)
EXIT_USAGE = 2    # a bad option, job file, hosts file, binary, worker command or host: nothing was started
EXIT_TIMEOUT = 124  # --timeout passed (JobTimeout)
# 128 + N: the launcher got signal N.


class LaunchError(Exception):
    """A problem found before or while starting the job (a user error):
    printed as one message, exit EXIT_USAGE."""


class JobFailed(Exception):
    """A process of the running job failed and the job cannot go on."""

    def __init__(self, proc, msg):
        super().__init__(msg)
        self.proc = proc


class JobTimeout(Exception):
    """The job ran past --timeout."""
