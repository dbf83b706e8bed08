package ops_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
)

// TestAppToken: with sidecar.app.token.file set, every delivery carries
// Baton-Token with the file's trimmed content, which an app checking it
// accepts; after the file changes, a reload makes later deliveries carry
// the new content; an app expecting another token refuses the delivery
// (401: not retried, dead-lettered).
func TestAppToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{noKafka: true, app: opstest.Options{Token: "first-token"}, config: func(c *props.Config) {
		c.AppTokenFile, c.RetryCount = file, 0
	}})
	header := func(id string) string {
		ds := e.app.ByID(id)
		if len(ds) == 0 {
			t.Fatalf("no delivery of %s", id)
		}
		return ds[len(ds)-1].Header.Get(ops.HeaderToken)
	}
	id := e.submit(`{"id":"tok-1","object":"tok"}`)
	e.waitState(id, api.OpDone, 20*time.Second)
	if got := header(id); got != "first-token" {
		t.Errorf("%s = %q, want the file's content trimmed", ops.HeaderToken, got)
	}

	if err := os.WriteFile(file, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Reload(e.cfg); err != nil {
		t.Fatal(err)
	}
	e.app.SetToken("second-token")
	id = e.submit(`{"id":"tok-2","object":"tok"}`)
	e.waitState(id, api.OpDone, 20*time.Second)
	if got := header(id); got != "second-token" {
		t.Errorf("after the reload %s = %q, want the new content", ops.HeaderToken, got)
	}

	e.app.SetToken("what-the-app-expects")
	id = e.submit(`{"id":"tok-3","object":"tok"}`)
	op := e.waitState(id, api.OpDLQPending, 20*time.Second)
	t.Logf("refused by the app: %s", op.LastError)
	if ds := e.app.ByID(id); len(ds) != 1 || ds[0].Status != 401 {
		t.Errorf("deliveries of %s = %+v, want one answered 401", id, ds)
	}

	// A file that became unreadable: the reload fails naming the key, and
	// the token in use stays.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Reload(e.cfg); err == nil || !strings.Contains(err.Error(), "sidecar.app.token.file") {
		t.Errorf("Reload with the token file gone = %v, want an error naming sidecar.app.token.file", err)
	}
}
