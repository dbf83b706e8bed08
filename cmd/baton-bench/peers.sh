#!/usr/bin/env bash
# peers.sh — Baton beside Curator, kazoo and go-zookeeper's lock, one run, one
# ZooKeeper: copies the shared peers harness (read-only in ../shared/peers)
# to a temp dir, builds it and baton-bench, and runs run_all.sh with both.
#
#   cmd/baton-bench/peers.sh            # all workloads, REPS=3 (about 8 min)
#   WORKLOADS="W1 W4" REPS=5 cmd/baton-bench/peers.sh
# Env as run_all.sh (REPS, WORKLOADS, PARAMS, ZK_PORT); OUT defaults to ./bench-results/<time>.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
peers=${PEERS_DIR:-$top/../shared/peers}
[[ -f $peers/run_all.sh ]] || { echo "peers.sh: no harness at $peers" >&2; exit 2; }
export PATH="$PATH:/usr/local/go/bin"
missing=""
for p in libcurator-client-java libcurator-framework-java libcurator-recipes-java python3-kazoo openjdk-17-jdk-headless; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [[ -n $missing ]]; then
  sudo=""; [[ $(id -u) = 0 ]] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi
work=$(mktemp -d -t baton-peers.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$peers/." "$work/"
chmod -R u+w "$work"
ZK_SH=${ZK_SH:-$(cd "$peers/../tools" && pwd)/zk.sh}
(cd "$work" && ./build.sh >&2)
go build -C "$top" -o "$work/baton/baton-bench" ./cmd/baton-bench
cat >"$work/baton/engine" <<'SH'
#!/usr/bin/env bash
w=$1; shift; exec "$(dirname "$0")/baton-bench" "$w" --impl baton-engine "$@"
SH
chmod +x "$work/baton/engine"
export OUT=${OUT:-$top/bench-results/$(date +%Y%m%dT%H%M%S)}
mkdir -p "$OUT"
cd "$work"
IMPLS=${IMPLS:-"./curator/bench ./kazoo/bench ./gozk/bench ./gozk/raw $work/baton/baton-bench $work/baton/engine"} \
  ZK_SH=$ZK_SH ./run_all.sh
cat "$OUT/summary.md"
