# Baton — make help lists the targets.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
PKGS ?= ./...
FUZZTIME ?= 30s
BENCHTIME ?= 2000x
WAITERS ?= 1000
GOTEST_TIMEOUT ?= 14m
# the lock and sidecar packages' tests each run as this many go test processes beside the other packages (.ci/gotest.sh)
TEST_SHARDS ?= 2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS := openjdk-17-jre-headless zookeeper zookeeper-bin kcat

.PHONY: help deps build test test-short run bench peers floors chaos fuzz lint cover clean deploy-test

help: ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

deps: ## install what is missing on a fresh Debian machine (java and javac, ZooKeeper, kcat, iptables for the partition test, jq and curl for the README's commands); idempotent
	@missing=""; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper zookeeper-bin"; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v iptables >/dev/null || missing="$$missing iptables"; \
	command -v jq >/dev/null || missing="$$missing jq"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  t0=$$(date +%s); \
	  log=$$(mktemp); \
	  if ! { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; } >$$log 2>&1; then \
	    cat $$log; echo "deps: apt-get failed (its output above)"; exit 1; fi; \
	  echo "deps: installed in $$(( $$(date +%s) - t0 )) s"; \
	else echo "deps: java, javac, zookeeper, kcat, iptables, jq and curl present"; fi

build: ## build bin/baton (release build: no dev command)
	$(GO) build -o bin/baton ./cmd/baton

# .ci/gotest.sh: the lock and sidecar packages, the longest, each as TEST_SHARDS processes started first;
# -p 2: the other packages two at a time beside those four (they still end before the lock package's
# shards; three at a time put seven test processes on 2 cores); -parallel 8: the lock package's long
# waiting tests run together.
# the files gofmt would change, if any, and a failure (test and lint)
GOFMT_CHECK = out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi

test: deps ## vet, gofmt, staticcheck + every test with -race against real ZooKeeper and the in-process broker (about 8 min on an idle 2-core machine, its tests 6; more when loaded)
	@echo "test: go vet of every package (the first run compiles every dependency: 1-3 min idle, longer loaded)"
	@bash .ci/alive.sh "go vet" $(GO) vet $(PKGS)
	@echo "test: gofmt and staticcheck (make lint)"
	@$(GOFMT_CHECK)
	@bash .ci/alive.sh "staticcheck" $(GO) tool staticcheck $(PKGS)
	@echo "test: go test -race of every package against real ZooKeeper and kfake (about 6 min idle); a line per package (or shard: .ci/gotest.sh) as it ends"
	@GO=$(GO) bash .ci/alive.sh "go test" bash .ci/gotest.sh $(TEST_SHARDS) "$(PKGS)" -- -race -count=1 -p 2 -parallel 8 -timeout $(GOTEST_TIMEOUT)
	@echo "test: the patched go-zookeeper's own tests (third_party/zk: its hand-written jute against reflect)"
	@cd third_party/zk && $(GO) vet . && $(GO) test -race -count=1 .

test-short: ## the quick tests (skips ensembles and long fault tests)
	$(GO) test -race -short -count=1 $(PKGS)

run: deps ## baton dev: ZooKeeper, broker, demo app and sidecar; prints exports and a tour (bin/baton = whole CLI + dev; ARGS=... adds flags)
	$(GO) build -tags dev -o bin/baton ./cmd/baton
	exec bin/baton dev $(ARGS)

deploy-test: ## docker-compose.yml in a real Docker engine (installs docker.io, builds images via debootstrap): lock, delivery, dead letter
	bash deploy/test/run.sh

bench: deps ## benchmarks with figures (engine, socket, queue, dlq, dispatcher), the waiter probe on one baton serve (WAITERS=10000 for the issue's), its latency per request against a raw echo (reqcost) and its CPU and context switches per W1 cycle and per request, beside the control's (cost)
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count 1 ./lock ./sidecar ./queue ./dlq ./ops
	$(GO) build -o bin/baton ./cmd/baton && $(GO) build -o bin/baton-bench ./cmd/baton-bench
	bin/baton-bench probe --baton bin/baton --waiters $(WAITERS)
	bin/baton-bench reqcost --baton bin/baton
	bin/baton-bench cost --baton bin/baton

peers: deps ## Baton vs Curator, kazoo and go-zookeeper's lock in one run (../shared/peers)
	bash cmd/baton-bench/peers.sh

floors: deps ## the floors issue 21's goals are set against, interleaved with go-zookeeper's lock of ../shared/peers (PEERS_DIR): W1, W2 on one sidecar and W4 (floor), W3 with a sidecar per client (w3floor); about 4 min
	$(GO) build -o bin/baton ./cmd/baton && $(GO) build -o bin/baton-bench ./cmd/baton-bench
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && cp -r $${PEERS_DIR:-../shared/peers}/gozk/. "$$d" && chmod -R u+w "$$d" && \
	  (cd "$$d" && $(GO) build -o lockbench .) && \
	  bin/baton-bench floor --baton bin/baton --gozk "$$d/lockbench" --rounds 5 --impls "gozk http:native client:native shared:native" && \
	  bin/baton-bench w3floor --baton bin/baton --gozk "$$d/lockbench" --rounds 5

chaos: deps ## the fault-injection tests only (kills, pauses, black holes), verbose
	$(GO) test -race -count=1 -v -run 'CutOff|Leader|Dropped|Kill|Pause|BlackHole|Outage|Lost|Crash' $(PKGS)

fuzz: ## every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; done

lint: ## gofmt, go vet, staticcheck; .ci/gotest-check.sh (make test's sharding selects every test once)
	@$(GOFMT_CHECK)
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	GO=$(GO) bash .ci/gotest-check.sh

cover: deps ## coverage report in cover.out
	$(GO) test -count=1 -coverprofile=cover.out $(PKGS) && $(GO) tool cover -func=cover.out | tail -1

clean:
	rm -rf bin cover.out
