package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops/opstest"
)

// lineOf returns the line of out that contains s ("" if none).
func lineOf(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestOpsLsAndDLQStatus (issue 13 item 5): baton ops ls lists and pages ops;
// dlq ls shows whether each letter's op was replayed and its state now;
// dlq replay --rate paces the replays; ops get shows the history of the
// attempts across the replay, and done cleared last_error.
func TestOpsLsAndDLQStatus(t *testing.T) {
	o := startOpsServe(t)
	var refuse atomic.Bool
	refuse.Store(true)
	o.app.SetRespond(func(_ context.Context, d opstest.Delivery) int {
		if strings.HasPrefix(d.Object, "bad") && refuse.Load() {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	o.mustBaton(0, "", "ops", "submit", "--id", "a-ok", "good", `{"n":1}`)
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		o.mustBaton(0, "", "ops", "submit", "--id", id, "bad"+id, `{"n":2}`)
	}
	o.waitOp("a-ok", api.OpDone)
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		o.waitOp(id, api.OpDeadLettered)
	}

	// ops ls: every op, filters, pages.
	out := o.mustBaton(0, "", "ops", "ls")
	if !strings.HasPrefix(out, "ID") || lineOf(out, "a-ok") == "" || !strings.Contains(lineOf(out, "b-2"), "dead_lettered") || strings.Contains(out, "next:") {
		t.Errorf("ops ls printed:\n%s", out)
	}
	if l := lineOf(out, "b-1"); !regexp.MustCompile(`^b-1\s+badb-1\s+dead_lettered\s+1\s+1\s+0\s+\S+Z\s+"app answered HTTP 400`).MatchString(l) {
		t.Errorf("ops ls line of b-1 = %q", l)
	}
	out = o.mustBaton(0, "", "ops", "ls", "--state", "done")
	if lineOf(out, "a-ok") == "" || lineOf(out, "b-1") != "" {
		t.Errorf("ops ls --state done printed:\n%s", out)
	}
	out = o.mustBaton(0, "", "ops", "ls", "--limit", "2")
	if lineOf(out, "a-ok") == "" || lineOf(out, "b-1") == "" || lineOf(out, "b-2") != "" || !strings.HasSuffix(out, "next: b-1\n") {
		t.Errorf("ops ls --limit 2 printed:\n%s", out)
	}
	out = o.mustBaton(0, "", "ops", "ls", "--limit", "2", "--after", "b-1")
	if lineOf(out, "b-2") == "" || lineOf(out, "b-3") == "" || strings.Contains(out, "next:") {
		t.Errorf("ops ls --after b-1 printed:\n%s", out)
	}
	out = o.mustBaton(0, "", "ops", "ls", "--limit", "1", "--all", "--object", "badb-3")
	if strings.Count(out, "\n") != 2 || lineOf(out, "b-3") == "" {
		t.Errorf("ops ls --all --object badb-3 printed:\n%s", out)
	}
	if code, _, errs := o.baton("", "ops", "ls", "--state", "finished"); code != exitUsage || !strings.Contains(errs, "state: ") {
		t.Errorf("ops ls --state finished = exit %d, %q; want 64 naming state", code, errs)
	}

	// dlq ls before any replay: not replayed, dead_lettered.
	waitCond(t, 30*time.Second, "three letters", func() bool {
		code, out, _ := o.baton("", "dlq", "ls")
		return code == 0 && strings.Count(out, "HTTP400") == 3
	})
	out = o.mustBaton(0, "", "dlq", "ls")
	if !strings.Contains(out, "REPLAYED") || !regexp.MustCompile(`b-2\s+HTTP400\s+1\s+no\s+dead_lettered\s`).MatchString(lineOf(out, "b-2")) {
		t.Errorf("dlq ls before replay printed:\n%s", out)
	}

	// b-1 replayed through the API (not the consumer group): dlq ls says so.
	refuse.Store(false)
	o.mustBaton(0, "", "ops", "replay", "b-1")
	o.waitOp("b-1", api.OpDone)
	out = o.mustBaton(0, "", "dlq", "ls")
	if !regexp.MustCompile(`b-1\s+HTTP400\s+1\s+yes\s+done\s`).MatchString(lineOf(out, "b-1")) ||
		!regexp.MustCompile(`b-3\s+HTTP400\s+1\s+no\s+dead_lettered\s`).MatchString(lineOf(out, "b-3")) {
		t.Errorf("dlq ls after replaying b-1 printed:\n%s", out)
	}

	// dlq replay --rate 2/s: b-2 and b-3 replayed at least 500 ms apart.
	if code, _, errs := o.baton("", "dlq", "replay", "--rate", "fast"); code != exitUsage || !strings.Contains(errs, "--rate") {
		t.Errorf("--rate fast = exit %d, %q; want 64 naming --rate", code, errs)
	}
	start := time.Now()
	out = o.mustBaton(0, "", "dlq", "replay", "--rate", "2/s")
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("dlq replay --rate 2/s of 2 letters took %v, want at least 500ms", took)
	}
	if !strings.Contains(out, "replayed b-2") || !strings.Contains(out, "replayed b-3") || !strings.Contains(out, "already handled 1") {
		t.Errorf("dlq replay printed:\n%s", out)
	}
	o.waitOp("b-2", api.OpDone)
	o.waitOp("b-3", api.OpDone)
	out = o.mustBaton(0, "", "dlq", "ls")
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		if !regexp.MustCompile(`\s+yes\s+done\s`).MatchString(lineOf(out, id)) {
			t.Errorf("dlq ls after replay: line of %s = %q, want replayed, done", id, lineOf(out, id))
		}
	}

	// ops get: the failure before the replay, the replay, the success; no last_error.
	out = o.mustBaton(0, "", "ops", "get", "b-2")
	hist := regexp.MustCompile(`(?s)history\s+\(oldest first\)\n\s+\S+Z\s+dlq_pending HTTP400 "app answered HTTP 400[^\n]*\n\s+\S+Z\s+replayed\n\s+\S+Z\s+done\n`)
	if !hist.MatchString(out) || !regexp.MustCompile(`last_error\s+-\n`).MatchString(out) || !regexp.MustCompile(`replays\s+1\n`).MatchString(out) {
		t.Errorf("ops get b-2 printed:\n%q", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("ops get: trailing spaces in %q (issue 20)", line)
		}
	}
}
