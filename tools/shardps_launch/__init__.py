"""shardps-launch as a package; tools/shardps-launch is its entry point
(cli.main). The parts, one concern each:

  jobfile     the flags and the job file -> the job (through shardps-coordinator --print-config)
  binaries    which shardps binaries the job needs, all found before anything starts
  placement   the hosts, and which one runs the coordinator, each server and each worker
  commands    what is launched: every process's command line and environment
  hostcheck   the checks of the hosts before anything trains (ssh, Slurm)
  procs       starting, reading, signalling and stopping processes
  supervise   what to do when a process of the running job ends
  launcher    the front end: one job from its description to its end
  output      prefixed lines, messages and reports; errors: exit statuses
  cli         main

Threads: the main thread runs the launch; each started process has a
reader thread (procs.Proc), and the host checks run one thread per host
(hostcheck.run_parallel). Each class says what it shares and under which lock.
"""
