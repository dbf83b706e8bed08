#!/usr/bin/env bash
# gotest.sh SHARDS PKGS -- GO-TEST-FLAGS...: go test of PKGS, with each of the
# longest packages (lock, sidecar; when PKGS includes them) split into SHARDS
# go test processes that start at once and run beside the other packages'.
#
# Why: those two are make test's tail. Most of their tests wait on ZooKeeper
# (sessions, cuts, timers) and most cannot call t.Parallel (a package-level
# hook, goleak, a CPU measurement), so they run one after another: the lock
# package alone took about 9.5 min with the machine half idle, and go test
# started the sidecar package's 5 min late, after the packages before it in
# its order. Each shard is a process of its own (its own ZooKeeper, hooks
# and goleak snapshot), so the tests' rules are unchanged; the shards just
# overlap.
#
# Tests are dealt round-robin by name. Every shard but the last runs the
# names dealt to it (-run); the last runs everything the others do not
# (-skip), so a test the name scan misses still runs, once.
set -u
shards=$1
pkgs=$2
shift 2
[ "${1:-}" = "--" ] && shift
go=${GO:-go}
module=github.com/batonhq/baton

# A caller's own -run or -skip (among the flags, or in GOFLAGS) cannot be
# combined with a shard's: the last of each flag wins, so every shard but
# the last would run all its names whatever the caller's -run, and the last
# would drop the caller's -skip. Then: no shards, one go test as before.
for a in "$@" ${GOFLAGS:-}; do
	if [[ $a =~ ^--?(test\.)?(run|skip)(=|$) ]]; then
		[ "$shards" -gt 1 ] 2>/dev/null && echo "go test: $a given: not sharded"
		shards=1
		break
	fi
done

others=$($go list $pkgs) || exit 1
pids=()

# shard DIR: DIR's tests in $shards processes, in the background
shard() {
	local dir=$1 names dealt=() s skip=""
	shift
	mapfile -t names < <(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(.*/\1/p' "$dir"/*_test.go | grep -vx TestMain | sort -u)
	for i in "${!names[@]}"; do
		s=$((i % shards))
		dealt[$s]+="${dealt[$s]:+|}${names[$i]}"
	done
	for ((s = 0; s < shards - 1; s++)); do
		echo "go test: $dir shard $((s + 1))/$shards: $(tr '|' '\n' <<<"${dealt[$s]}" | wc -l) tests"
		$go test "$@" -run "^(${dealt[$s]})\$" "./$dir" &
		pids+=($!)
		skip+="${skip:+|}${dealt[$s]}"
	done
	echo "go test: $dir shard $shards/$shards: the rest"
	$go test "$@" -skip "^(${skip})\$" "./$dir" &
	pids+=($!)
}

if [ "$shards" -gt 1 ]; then
	for dir in lock sidecar; do
		if grep -qx "$module/$dir" <<<"$others"; then
			others=$(grep -vx "$module/$dir" <<<"$others")
			shard "$dir" "$@"
		fi
	done
fi
if [ -n "$others" ]; then
	$go test "$@" $others &
	pids+=($!)
fi

rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=1
done
exit $rc
