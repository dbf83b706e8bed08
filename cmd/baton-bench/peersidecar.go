package main

// peer-sidecar is the peer's lock deployed the way Baton is: go-zookeeper's
// zk.NewLock (the best peer of the peers harness in W2–W4) behind a plain
// net/http server on a unix socket, one process with one ZooKeeper session,
// speaking the subset of Baton's API that the bench drives (POST
// /v1/locks/{object}/acquire answers {"lease_id"}, DELETE /v1/leases/{id}
// answers {"released":true}, GET /readyz). It is a control, not a product:
// it has no fencing, no validity, no timeouts and no authorization. Run as
// the impl gozk-http (a process per client, the stock net/http client), it
// shows what the deployment shape itself costs — a process and an HTTP
// round trip per call on the same machine — so that what is left is Baton's
// own. go-zookeeper is this module's (third_party/zk, BATON_PATCH.md: an
// encoder change only; the lock recipe is upstream's).

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

func peerSidecarMain(args []string) int {
	fs := flag.NewFlagSet("baton-bench peer-sidecar", flag.ExitOnError)
	zkAddr := fs.String("zk", "127.0.0.1:2181", "ZooKeeper address")
	root := fs.String("root", "/bench", "lock root")
	sock := fs.String("socket", "", "unix socket to serve on")
	_ = fs.Parse(args)
	if *sock == "" {
		fmt.Fprintln(os.Stderr, "peer-sidecar: --socket is required")
		return 64
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1) // as `baton serve` (cmd/baton/runtime.go): the same runtime for both
	}
	conn, ev, err := zk.Connect([]string{*zkAddr}, sessionTimeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer-sidecar:", err)
		return 1
	}
	var connected atomic.Bool
	go func() {
		for e := range ev {
			if e.Type == zk.EventSession {
				connected.Store(e.State == zk.StateHasSession)
			}
		}
	}()
	var (
		mu     sync.Mutex
		leases = map[string]*zk.Lock{}
		seq    atomic.Int64
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !connected.Load() {
			http.Error(w, "no session", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /v1/locks/{object...}", func(w http.ResponseWriter, r *http.Request) {
		obj, ok := trimSuffix(r.PathValue("object"), "/acquire")
		if !ok {
			http.NotFound(w, r)
			return
		}
		l := zk.NewLock(conn, *root+"/"+obj, zk.WorldACL(zk.PermAll))
		if err := l.Lock(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		id := strconv.FormatInt(seq.Add(1), 10)
		mu.Lock()
		leases[id] = l
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"lease_id": id, "object": obj})
	})
	mux.HandleFunc("DELETE /v1/leases/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		mu.Lock()
		l := leases[id]
		delete(leases, id)
		mu.Unlock()
		if l == nil {
			http.Error(w, "no such lease", http.StatusNotFound)
			return
		}
		if err := l.Unlock(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"released": true})
	})
	_ = os.Remove(*sock)
	ln, err := net.Listen("unix", *sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer-sidecar:", err)
		return 1
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "peer-sidecar:", err)
		return 1
	}
	return 0
}

func trimSuffix(s, suffix string) (string, bool) {
	if len(s) <= len(suffix) || s[len(s)-len(suffix):] != suffix {
		return "", false
	}
	return s[:len(s)-len(suffix)], true
}
