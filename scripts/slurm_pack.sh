#!/usr/bin/env bash
# Slurm array template for a partitioned pack: each array task packs part I of N (I from
# SLURM_ARRAY_TASK_ID, numbered from 0); a failed or preempted task is simply resubmitted
# (`sbatch --array=5 ...` reruns part 5). Plan once, then:
#
#   shardtool plan /data/imagenet/train /shared/out --resize shorter:256 --shard-samples 5000
#   sbatch --array=0-63 scripts/slurm_pack.sh /shared/out 64
#   shardtool status /shared/out && shardtool merge /shared/out
#
# OUTPUT must be on a file system every node mounts at the same path.
#SBATCH --job-name=shardtool-pack
#SBATCH --cpus-per-task=16
#SBATCH --requeue
set -euo pipefail
OUTPUT=${1:?usage: slurm_pack.sh OUTPUT PARTS}
PARTS=${2:?usage: slurm_pack.sh OUTPUT PARTS}
exec "${SHARDTOOL:-shardtool}" pack --plan "$OUTPUT" --part "auto/$PARTS" \
  --jobs "${SLURM_CPUS_PER_TASK:-$(nproc)}"
