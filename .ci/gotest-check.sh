#!/usr/bin/env bash
# gotest-check.sh [SHARDS...]: checks .ci/gotest.sh's dealing without running
# any test: with a stand-in for go test that records its arguments, every
# test, fuzz target and example `go test -list` finds in the lock and
# sidecar packages must be selected by exactly one shard's -run/-skip, and
# a caller's own -run must turn sharding off. Exit 1 on a mismatch.
# Run from the module's root (default SHARDS: 2 3).
set -u
real=${GO:-go}
real=$(command -v "$real") || { echo "gotest-check: no go"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/go" <<EOF
#!/usr/bin/env bash
if [ "\$1" = test ]; then printf '%s\n' "\$@" >"$tmp/call.\$\$"; exit 0; fi
exec "$real" "\$@"
EOF
chmod +x "$tmp/go"

# flag FILE NAME: the last value of -NAME in the recorded call FILE ("" if none)
flag() { awk -v f="-$2" 'p { v = $0; p = 0 } $0 == f { p = 1; set = 1 } END { if (set) print v; else print "\001none" }' "$1"; }

rc=0
for p in lock sidecar; do
	"$real" test -list '.*' "./$p" | grep -E '^(Test|Fuzz|Example)' | sort >"$tmp/names.$p" || {
		echo "gotest-check: go test -list ./$p failed"
		exit 1
	}
done
[ $# -eq 0 ] && set -- 2 3
for shards in "$@"; do
	rm -f "$tmp"/call.*
	GO="$tmp/go" bash .ci/gotest.sh "$shards" ./... -- -count=1 >/dev/null || {
		echo "gotest-check: gotest.sh $shards failed"
		rc=1
	}
	for p in lock sidecar; do
		: >"$tmp/picked"
		n=0
		for c in "$tmp"/call.*; do
			[ "$(tail -n 1 "$c")" = "./$p" ] || continue
			n=$((n + 1))
			run=$(flag "$c" run) skip=$(flag "$c" skip)
			sel=$(cat "$tmp/names.$p")
			[ "$run" != $'\001none' ] && sel=$(grep -E -- "$run" <<<"$sel")
			[ "$skip" != $'\001none' ] && sel=$(grep -vE -- "$skip" <<<"$sel")
			[ -n "$sel" ] && echo "$sel" >>"$tmp/picked"
		done
		if [ "$n" -ne "$shards" ]; then
			echo "gotest-check: $shards shards: $n go test processes for ./$p"
			rc=1
		fi
		twice=$(sort "$tmp/picked" | uniq -d)
		never=$(comm -13 <(sort -u "$tmp/picked") "$tmp/names.$p")
		if [ -n "$twice$never" ]; then
			echo "gotest-check: $shards shards: ./$p: run more than once: [$(echo $twice)]; never run: [$(echo $never)]"
			rc=1
		else
			echo "gotest-check: $shards shards: ./$p: $(wc -l <"$tmp/names.$p") names, each in exactly one of $n shards"
		fi
	done
done

# a caller's -run: one plain go test of every package, lock and sidecar included
rm -f "$tmp"/call.*
GO="$tmp/go" bash .ci/gotest.sh 2 ./... -- -count=1 -run TestX >/dev/null
calls=$(ls "$tmp"/call.* 2>/dev/null | wc -l)
if [ "$calls" -ne 1 ] || ! grep -qx "github.com/batonhq/baton/lock" "$tmp"/call.*; then
	echo "gotest-check: with a caller's -run, $calls go test processes (want 1, of every package)"
	rc=1
else
	echo "gotest-check: a caller's -run: one go test, not sharded"
fi
exit $rc
