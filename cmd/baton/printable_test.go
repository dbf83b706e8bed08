package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, printable, noEscapes string }{
		{"nightly job", "nightly job", "nightly job"},
		{"ü ☃ 日本", "ü ☃ 日本", "ü ☃ 日本"},
		{"", "", ""},
		{"a\x1b[2Jb", `"a\x1b[2Jb"`, `a\x1b[2Jb`},
		{"line\nFAKE", `"line\nFAKE"`, "line\nFAKE"},
		{"tab\there", `"tab\there"`, "tab\there"},
		{"bidi\u202eevil", `"bidi\u202eevil"`, `bidi\u202eevil`},
		{"c1\u009b31m", `"c1\u009b31m"`, `c1\u009b31m`},
		{"bad\xffutf8", `"bad\xffutf8"`, `bad\xffutf8`},
		{"bell\a", `"bell\a"`, `bell\a`},
	} {
		if got := printable(tc.in); got != tc.printable {
			t.Errorf("printable(%q) = %s, want %s", tc.in, got, tc.printable)
		}
		if got := noEscapes(tc.in); got != tc.noEscapes {
			t.Errorf("noEscapes(%q) = %s, want %s", tc.in, got, tc.noEscapes)
		}
	}
}

// TestCallerTextQuoted (issue 18 §7): text callers choose — holder info, a
// revoke reason, an app's error body (last_error) — is shown with its
// control characters escaped by baton locks, revoke, ops get, ops ls and
// dlq ls: no ESC byte reaches the terminal and no output line starts with
// the text after an embedded newline.
func TestCallerTextQuoted(t *testing.T) {
	const evil = "job\x1b[2J\x1b[31m\nFAKE: all clear"
	const bodyEvil = "refused\x1b]0;pwned\a\nFAKE: all clear"
	app := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest) // dead-lettered at once
		fmt.Fprint(w, bodyEvil)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(ln)
	t.Cleanup(func() { app.Close() })

	cleanEnv(t)
	dir, err := os.MkdirTemp("", "bq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	o := &opsServe{t: t, socket: filepath.Join(dir, "s.sock"), logs: &testenv.Buffer{}}
	o.zk = testenv.ZooKeeperT(t, testenv.ZKOptions{})
	o.kafka = testenv.KafkaT(t, testenv.KafkaOptions{})
	opts := props.LoadOptions{NoFile: true, Set: []string{
		"zookeeper.servers=" + o.zk.ConnString(), "zookeeper.lock.root=/quoted", "zookeeper.session.timeout=4000",
		"sidecar.socket.path=" + o.socket, "sidecar.node.id=q-node", "sidecar.app.url=http://" + ln.Addr().String() + "/deliver",
		"sidecar.shutdown.grace=2000", "queue.dir=" + filepath.Join(dir, "queue"), "kafka.brokers=" + o.kafka.Addr(),
		"elastic.request.retry.count=0", "zookeeper.auth.digest=u:p",
	}}
	loaded, err := props.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	g := &globals{stdin: strings.NewReader(""), stdout: o.logs, stderr: o.logs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveLoaded(ctx, g, loaded, opts, nil) }()
	o.c = client.New(o.socket)
	t.Cleanup(func() {
		o.c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	waitCond(t, 30*time.Second, "sidecar ready", func() bool {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return o.c.Ready(rctx) == nil
	})

	clean := func(what, out string) {
		t.Helper()
		if strings.ContainsAny(out, "\x1b\a") {
			t.Errorf("%s prints a raw control character:\n%q", what, out)
		}
		if regexp.MustCompile(`(?m)^FAKE`).MatchString(out) {
			t.Errorf("%s prints the text after an embedded newline as a line of its own:\n%s", what, out)
		}
	}
	l, err := o.c.Acquire(context.Background(), "q1", client.WithInfo(evil), client.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	for _, args := range [][]string{{"locks"}, {"locks", "q1"}} {
		out := o.mustBaton(0, "", args...)
		clean(strings.Join(args, " "), out)
		if !strings.Contains(out, `job\x1b[2J\x1b[31m\nFAKE: all clear`) {
			t.Errorf("baton %s does not show the info escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	out := o.mustBaton(0, "", "revoke", "--reason", "why\x1b[1A\nFAKE: reason", "q1")
	clean("revoke", out)
	if !strings.Contains(out, `job\x1b[2J\x1b[31m\nFAKE: all clear`) || !strings.Contains(out, `why\x1b[1A\nFAKE: reason`) {
		t.Errorf("baton revoke does not show the info and reason escaped:\n%s", out)
	}

	o.mustBaton(0, "", "ops", "submit", "--id", "q-op", "qo", `{"n":1}`)
	o.waitOp("q-op", api.OpDeadLettered)
	const shown = `refused\x1b]0;pwned\a\nFAKE: all clear`
	for _, args := range [][]string{{"ops", "get", "q-op"}, {"ops", "ls"}} {
		out := o.mustBaton(0, "", args...)
		clean(strings.Join(args, " "), out)
		if !strings.Contains(out, shown) {
			t.Errorf("baton %s does not show last_error escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	waitCond(t, 30*time.Second, "the dead letter", func() bool {
		code, out, _ := o.baton("", "dlq", "ls")
		return code == 0 && strings.Contains(out, "q-op")
	})
	out = o.mustBaton(0, "", "dlq", "ls")
	clean("dlq ls", out)
	if !strings.Contains(out, shown) {
		t.Errorf("baton dlq ls does not show last_error escaped:\n%s", out)
	}
}
