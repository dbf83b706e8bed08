#!/usr/bin/env bash
# alive.sh NAME CMD...: runs CMD and, while it runs, prints a line every 60 s
# saying it is still running and for how long, so that a long silent step
# (go vet compiling every dependency, a package's tests) shows it is alive.
# The exit status is CMD's.
set -u
name=$1
shift
start=$(date +%s)
(
	while sleep 60; do
		echo "$name: still running ($(( $(date +%s) - start )) s)"
	done
) &
beat=$!
trap 'kill $beat 2>/dev/null' EXIT
"$@"
rc=$?
echo "$name: done in $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
