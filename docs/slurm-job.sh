#!/bin/bash
# A shardps job under Slurm: 2 nodes, the coordinator, 2 servers and 4
# workers spread over them, one srun step each (shardps-launch --slurm).
#   sbatch docs/slurm-job.sh
#SBATCH --job-name=shardps-mlp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=01:00:00
#SBATCH --output=shardps-%j.out
set -euo pipefail
# The shardps binaries and this job file must be at the same path on every
# node (a shared file system, or the same install everywhere).
SHARDPS=${SHARDPS:-/opt/shardps}
exec "$SHARDPS/bin/shardps-launch" --slurm --bin-dir "$SHARDPS/bin" \
  --servers 2 --workers 4 --consistency bounded --staleness 2 \
  --snapshot-dir "$HOME/shardps-snapshots/$SLURM_JOB_ID" --snapshot-every-sec 300 \
  -- shardps-worker --coordinator {coordinator} --rank {rank} --model mlp --epochs 10
