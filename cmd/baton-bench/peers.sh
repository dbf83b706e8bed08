#!/usr/bin/env bash
# peers.sh — Baton beside Curator, kazoo and go-zookeeper's lock, one run, one
# ZooKeeper: copies the shared peers harness (read-only in ../shared/peers)
# to a temp dir, builds it, baton-bench and baton, and runs run_all.sh with
# Baton's implementations beside the peers:
#   baton          in-process sidecars (sidecar.Server), Baton's Go client
#   baton-engine   the lock engine directly
#   baton-http     one `baton serve` process per client, Go's stock net/http client
#   baton-client   one `baton serve` process per client, Baton's Go client
#   baton-shared   one `baton serve` process for all clients (W2/W3: 8 app
#                  clients on one node), Baton's Go client
#   gozk-http      the control (BATON_IMPLS token "control"): go-zookeeper's
#                  zk.NewLock deployed as baton-http is, a `baton-bench
#                  peer-sidecar` process per client behind a plain net/http
#                  server ("control-shared": one for all clients, gozk-shared)
#
#   cmd/baton-bench/peers.sh            # all workloads, REPS=3, both protocols and both controls (about 25 min on a quiet 2-core VM)
#   WORKLOADS="W1 W4" REPS=5 cmd/baton-bench/peers.sh
#   BATON_IMPLS="http client" cmd/baton-bench/peers.sh   # a subset of Baton's
#   BATON_IMPLS="control http http:native" ...           # the control beside Baton as deployed
#   BATON_IMPLS="http shared http:native shared:native" ...  # :native = zookeeper.lock.protocol=native
#                  (reported as baton-<impl>-native)
#   BATON_IMPLS="client client:nowait http:native:nowait" ...  # :nowait (last) = releases with
#                  DELETE ?wait=false, answered before the write lands (reported as ...-nowait)
# Env as run_all.sh (REPS, WORKLOADS, PARAMS, ZK_PORT); OUT defaults to
# ./bench-results/<time>; BATON_SRC builds baton and baton-bench from
# another tree (e.g. a `git archive HEAD` export).
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
src=${BATON_SRC:-$top}
go build -C "$src" -o "$work/baton/baton-bench" ./cmd/baton-bench
go build -C "$src" -o "$work/baton/baton" ./cmd/baton
baton_impls=""
for b in ${BATON_IMPLS:-inproc engine http client shared http:native client:native shared:native control control-shared}; do
  if [[ $b = inproc ]]; then baton_impls="$baton_impls $work/baton/baton-bench"; continue; fi
  proto=plugin wait=true
  if [[ $b = *:nowait ]]; then wait=false; b=${b%:nowait}; fi
  if [[ $b = *:native ]]; then proto=native; b=${b%:native}; fi
  impl=baton-$b
  case $b in control) impl=gozk-http;; control-shared) impl=gozk-shared;; esac
  wrapper=$work/baton/$b-$proto-$wait
  cat >"$wrapper" <<SH
#!/usr/bin/env bash
w=\$1; shift; exec "\$(dirname "\$0")/baton-bench" "\$w" --impl $impl --protocol $proto --release-wait=$wait --baton "\$(dirname "\$0")/baton" "\$@"
SH
  chmod +x "$wrapper"
  baton_impls="$baton_impls $wrapper"
done
export OUT=${OUT:-$top/bench-results/$(date +%Y%m%dT%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # absolute: run_all.sh writes it from the temp copy (a relative OUT landed there, and went with it)
cd "$work"
IMPLS=${IMPLS:-"./curator/bench ./kazoo/bench ./gozk/bench ./gozk/raw$baton_impls"} \
  ZK_SH=$ZK_SH ./run_all.sh
cat "$OUT/summary.md"
