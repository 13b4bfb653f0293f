#!/usr/bin/env bash
# A rank that stops answering makes the others fail with a clear error within the timeout,
# not hang: rank 1 of dist_check sleeps, rank 0 gives up after 2 s and exits, and the
# launcher stops the job.
#   bash tests/dist/hang.sh <mpiexec> <dist_check>
set -uo pipefail
start=$(date +%s)
output=$("$1" -np 2 --oversubscribe "$2" 2 hang 2>&1)
code=$?
elapsed=$(($(date +%s) - start))
echo "$output" | tail -5
if [ "$code" -eq 0 ]; then echo "hang.sh: the job succeeded with a rank hanging" >&2; exit 1; fi
if ! echo "$output" | grep -q "tg_dist_allreduce_grads: rank 0 waited 2 s"; then
    echo "hang.sh: no timeout message from rank 0" >&2
    exit 1
fi
if [ "$elapsed" -gt 60 ]; then echo "hang.sh: the job took ${elapsed} s to end" >&2; exit 1; fi
echo "hang.sh: rank 0 gave up and the job ended in ${elapsed} s"
