package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// testCheck: `baton check OBJECT TOKEN` exits 0 for the current grant's
// token (printing the validity its own sidecar told), 1 for a stale one
// (naming the current token, or that the object is free), 64 for a bad
// token, 69 when the sidecar cannot be reached.
func testCheck(t *testing.T, s *sidecarProc) {
	ctx := context.Background()
	c := client.New(s.socket)
	defer c.Close()
	const obj = "check/row 1"
	l, err := c.Acquire(ctx, obj, client.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	tok := strconv.FormatInt(l.Token(), 10)
	code, out, stderr := runBaton(t, "--socket", s.socket, "check", obj, tok)
	if code != 0 || !strings.HasPrefix(out, "current: token "+tok+` of "check/row 1", valid for `) {
		t.Errorf("baton check (current): exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	old := strconv.FormatInt(l.Token()-1, 10)
	code, out, stderr = runBaton(t, "--socket", s.socket, "check", obj, old)
	if code != exitFailure || out != "stale: token "+old+` of "check/row 1"; the current grant is token `+tok+"\n" || stderr != "" {
		t.Errorf("baton check (stale): exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = runBaton(t, "--socket", s.socket, "check", "--json", obj, tok)
	var v api.CheckResult
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || !v.Current || v.Token != l.Token() {
		t.Errorf("baton check --json: exit %d, stdout %q", code, out)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runBaton(t, "--socket", s.socket, "check", obj, tok)
	if code != exitFailure || out != "stale: token "+tok+` of "check/row 1"; the object is free`+"\n" {
		t.Errorf("baton check after the release: exit %d, stdout %q", code, out)
	}
	for _, args := range [][]string{{obj, "x"}, {obj, "0"}, {obj, "-4"}, {obj, "+4"}, {obj}, {}} {
		code, _, stderr = runBaton(t, append([]string{"--socket", s.socket, "check"}, args...)...)
		if code != exitUsage || stderr == "" {
			t.Errorf("baton check %q: exit %d, stderr %q; want 64", args, code, stderr)
		}
	}
	code, _, stderr = runBaton(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "check", obj, tok)
	if code != exitUnavailable {
		t.Errorf("baton check against no sidecar: exit %d, stderr %q; want 69", code, stderr)
	}
}
