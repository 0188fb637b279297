#!/usr/bin/env bash
# One stage of `make test`: runs `make STAGE` within a bound, then says how
# long it took (and, past the bound, that it hung), so that a CI log shows
# where its time went and a hung test fails its stage instead of the run.
#
#   scripts/stage.sh STAGE MINUTES
#
# `timeout` runs the stage in a process group of its own and signals the
# whole group: the servers a hung test started go with it. The bounds (in
# the Makefile) are two to three times a stage's time on a loaded two-core
# machine, so that one hung stage still leaves the run within CI's 90 min.
set -uo pipefail
stage="$1" minutes="$2"
started=$SECONDS
timeout --kill-after=30 "$((minutes * 60))" "${MAKE:-make}" --no-print-directory "$stage"
status=$?
took=$((SECONDS - started))
if [[ $status -eq 124 || $status -eq 137 ]]; then
  echo "make test: stage $stage did not end within $minutes min: stopped (a hung test?)" >&2
elif [[ $status -ne 0 ]]; then
  echo "make test: stage $stage failed after ${took} s" >&2
else
  echo "make test: stage $stage took ${took} s"
fi
exit "$status"
