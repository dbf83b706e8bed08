#!/usr/bin/env bash
# make deploy-test: docker-compose.yml + docker-compose.test.yml in a real
# Docker engine. From a fresh Debian machine (root or sudo):
#   1. installs docker.io, docker-compose (Debian's) and debootstrap if missing,
#      starts dockerd if none runs (--bridge=none --iptables=false: every
#      container uses the host network; tests use loopback addresses only);
#   2. builds the images no registry can give here: baton-base (Debian
#      bookworm minbase by debootstrap from the apt sources' mirror, imported),
#      baton-go (baton-base + this machine's Go toolchain), baton:latest
#      from deploy/Dockerfile on them, baton-test-zookeeper (Debian's
#      zookeeper package), baton-test-standin (baton:latest + the stand-in
#      Kafka broker and app of deploy/test/standin);
#   3. brings the stack up on free loopback ports and waits for Baton's
#      healthcheck; the app container takes a lock through the shared socket
#      volume (baton lock), submits an op that is delivered and one that is
#      dead-lettered (the stand-in app answers 400), and reads the letter
#      back from the topic (baton dlq ls);
#   4. tears the stack down (containers, volumes) and stops the dockerd it
#      started. The images stay as a cache: KEEP_IMAGES=0 removes them.
# Prints the time of each step. Exit status 0 when every check passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export PATH=$PATH:/usr/local/go/bin
export DOCKER_BUILDKIT=0 # the classic builder: no buildx plugin needed, host network for RUN
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
work=${DEPLOY_TEST_DIR:-/var/tmp/baton-deploy-test}
project=batondeploytest
t0=$(date +%s)
step_t=$t0
# quiet runs a command, printing its output only when it fails, and a line
# every 20 s while it runs (a docker build or debootstrap takes a minute or
# more, and silence looks like a hang).
quiet() {
	local log rc=0 beat start
	log=$(mktemp)
	start=$(date +%s)
	(while sleep 20; do echo "deploy-test:   … $* ($(($(date +%s) - start)) s so far)" | cut -c1-140; done) &
	beat=$!
	"$@" >"$log" 2>&1 || rc=$?
	kill $beat 2>/dev/null
	wait $beat 2>/dev/null || true
	[ $rc = 0 ] || cat "$log" >&2
	rm -f "$log"
	return $rc
}
step() {
	local now
	now=$(date +%s)
	echo "deploy-test: [$((now - step_t)) s] done; $* (total $((now - t0)) s)"
	step_t=$now
}

# 1. packages and the engine
missing=""
command -v dockerd >/dev/null || missing="$missing docker.io"
command -v docker-compose >/dev/null || missing="$missing docker-compose"
command -v debootstrap >/dev/null || missing="$missing debootstrap"
if [ -n "$missing" ]; then
	echo "deploy-test: installing$missing (about 1 min)"
	quiet $SUDO apt-get update -qq
	quiet env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
started_dockerd=""
if ! $SUDO docker info >/dev/null 2>&1; then
	$SUDO mkdir -p "$work"
	echo "deploy-test: starting dockerd (log $work/dockerd.log)"
	$SUDO sh -c "dockerd --bridge=none --iptables=false --ip6tables=false >'$work/dockerd.log' 2>&1 & echo \$! >'$work/dockerd.pid'"
	started_dockerd=$(cat "$work/dockerd.pid")
	for _ in $(seq 60); do $SUDO docker info >/dev/null 2>&1 && break; sleep 0.5; done
	$SUDO docker info >/dev/null
fi
docker() { if [ -n "$SUDO" ]; then sudo docker "$@"; else command docker "$@"; fi; }
compose() {
	$SUDO env ZK_PORT="$ZK_PORT" KAFKA_PORT="$KAFKA_PORT" APP_PORT="$APP_PORT" \
		docker-compose -p "$project" -f docker-compose.yml -f docker-compose.test.yml "$@"
}
stop_dockerd() {
	if [ -n "$started_dockerd" ]; then
		$SUDO kill "$started_dockerd" 2>/dev/null || true
		for _ in $(seq 40); do $SUDO kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.5; done
	fi
}
step "packages and dockerd ready"

# 2. images
if ! docker image inspect baton-base >/dev/null 2>&1; then
	# the Debian mirror of this machine's apt sources
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$mirror" ] || { echo "deploy-test: no Debian mirror in the apt sources" >&2; exit 1; }
	$SUDO rm -rf "$work/rootfs"
	$SUDO mkdir -p "$work"
	echo "deploy-test: debootstrap bookworm minbase (1-2 min)"
	quiet $SUDO debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" || exit 1
	$SUDO tar -C "$work/rootfs" -c . | docker import - baton-base >/dev/null
	$SUDO rm -rf "$work/rootfs"
	step "baton-base imported"
fi
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
if [ "$(docker image inspect -f '{{index .Config.Labels "go"}}' baton-go 2>/dev/null)" != "$gover" ]; then
	ctx="$work/goctx"
	$SUDO rm -rf "$ctx"
	$SUDO mkdir -p "$ctx"
	$SUDO cp -a "$goroot" "$ctx/go"
	# the machine's CA bundle: module downloads may pass a TLS-inspecting proxy
	$SUDO cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ctx/ca-certificates.crt"
	printf 'FROM baton-base\nCOPY go /usr/local/go\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\nLABEL go=%s\n' "$gover" |
		$SUDO tee "$ctx/Dockerfile" >/dev/null
	quiet docker build -t baton-go "$ctx"
	$SUDO rm -rf "$ctx"
	step "baton-go built ($gover)"
fi
quiet docker build --network host -f deploy/Dockerfile --build-arg GO_IMAGE=baton-go --build-arg BASE_IMAGE=baton-base \
	--build-arg GOPROXY="$(go env GOPROXY)" -t baton:latest .
step "baton:latest built from deploy/Dockerfile"
if ! docker image inspect baton-test-zookeeper >/dev/null 2>&1; then
	quiet docker build --network host -t baton-test-zookeeper -f deploy/test/zookeeper.Dockerfile deploy/test
	step "baton-test-zookeeper built"
fi
sctx=$(mktemp -d)
trap 'rm -rf "$sctx"' EXIT
CGO_ENABLED=0 go build -trimpath -o "$sctx/standin" ./deploy/test/standin
printf 'FROM baton:latest\nCOPY standin /usr/local/bin/standin\nENTRYPOINT ["/usr/local/bin/standin"]\nCMD []\n' >"$sctx/Dockerfile"
quiet docker build -t baton-test-standin "$sctx"
step "baton-test-standin built"

# 3. the stack, on free loopback ports
read -r ZK_PORT KAFKA_PORT APP_PORT < <("$sctx/standin" ports 3)
export ZK_PORT KAFKA_PORT APP_PORT
echo "deploy-test: zookeeper 127.0.0.1:$ZK_PORT, kafka 127.0.0.1:$KAFKA_PORT, app 127.0.0.1:$APP_PORT"
teardown() {
	compose down -v --remove-orphans >/dev/null 2>&1 || true
	stop_dockerd
	if [ "${KEEP_IMAGES:-1}" = 0 ]; then
		docker rmi baton-test-standin baton-test-zookeeper baton:latest baton-go baton-base >/dev/null 2>&1 || true
	fi
	rm -rf "$sctx"
}
fail() {
	echo "deploy-test: FAILED: $*" >&2
	compose ps >&2 || true
	compose logs --no-color --tail=60 >&2 || true
	teardown
	exit 1
}
trap 'fail "interrupted or a command failed (line $LINENO)"' ERR INT TERM
compose down -v --remove-orphans >/dev/null 2>&1 || true
compose up -d >/dev/null 2>&1 || fail "docker-compose up"
for _ in $(seq 120); do
	h=$(docker inspect -f '{{.State.Health.Status}}' "$(compose ps -q baton)" 2>/dev/null || true)
	[ "$h" = healthy ] && break
	sleep 1
done
[ "$h" = healthy ] || fail "baton not healthy (health: $h)"
step "stack up, baton healthy"

app() { compose exec -T app "$@"; }
# The app takes a lock through the socket in the shared volume and, holding
# it, sees itself as the holder.
out=$(app baton lock --info "deploy-test" deploy-test -- baton locks deploy-test) || fail "baton lock: $out"
echo "$out" | grep -q 'info "deploy-test"' || fail "the lock holder is not the app: $out"
echo "deploy-test: the app held the lock: $(echo "$out" | grep holder)"
# One op delivered, one dead-lettered (the stand-in app answers 400 for object "dead").
app baton ops submit --id deploy-ok live '{"n":1}' >/dev/null || fail "submit deploy-ok"
app baton ops submit --id deploy-dead dead '{"n":2}' >/dev/null || fail "submit deploy-dead"
wait_state() {
	local s=""
	for _ in $(seq 60); do
		s=$(app baton ops get "$1" | awk '$1 == "state" {print $2}') || true
		[ "$s" = "$2" ] && return 0
		sleep 0.5
	done
	fail "op $1 is ${s:-unknown}, want $2"
}
wait_state deploy-ok done
wait_state deploy-dead dead_lettered
# The app logs a delivery after answering it: the op can be done first.
logged=""
for _ in $(seq 40); do
	compose logs --no-color app | grep -q 'delivery op=deploy-ok object=live .* -> 200' && logged=yes && break
	sleep 0.5
done
[ -n "$logged" ] || fail "the app did not log deploy-ok's delivery"
letters=$(app baton dlq ls) || fail "baton dlq ls: $letters"
echo "$letters" | grep -q 'deploy-dead' || fail "no dead letter for deploy-dead: $letters"
echo "deploy-test: dead letter read back: $(echo "$letters" | grep deploy-dead)"
step "lock, delivery, dead letter checked"

# 4. down
trap - ERR INT TERM
teardown
trap - EXIT
step "torn down"
echo "deploy-test: passed in $(($(date +%s) - t0)) s"
