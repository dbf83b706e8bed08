package sidecar

import (
	"strings"
	"testing"
	"time"
)

// TestPreemptWaits: the rule a preempting request must meet (preempt.go):
// wait_ms and preempt_wait_ms each at least the holder's cleanup_ms +
// PreemptMargin; the error names the field and the numbers.
func TestPreemptWaits(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p := func(n int) *time.Duration { d := ms(n); return &d }
	for _, tc := range []struct {
		name        string
		wait        time.Duration
		waitGiven   bool
		preemptWait *time.Duration
		cleanup     time.Duration
		field, msg  string // "" = accepted
	}{
		{"try once, no holder read yet", 0, true, nil, 0, "wait_ms", "(try once)"},
		{"default wait under the margin", ms(500), false, nil, 0, "wait_ms", "zookeeper.foreground.task.timeout = 500"},
		{"margin alone", ms(1000), true, nil, 0, "", ""},
		{"preempt_wait 0", ms(5000), true, p(0), 0, "preempt_wait_ms", "cannot shorten"},
		{"wait one short of cleanup + margin", ms(5999), true, nil, ms(5000), "wait_ms", "cleanup_ms (5000) + 1000 = 6000 ms"},
		{"wait exactly cleanup + margin", ms(6000), true, nil, ms(5000), "", ""},
		{"preempt_wait under cleanup + margin", ms(60000), true, p(5000), ms(5000), "preempt_wait_ms", "= 6000 ms"},
		{"both enough", ms(60000), true, p(6000), ms(5000), "", ""},
	} {
		err := preemptWaits(tc.wait, tc.waitGiven, "zookeeper.foreground.task.timeout", tc.preemptWait, tc.cleanup)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want accepted", tc.name, err)
			}
			continue
		}
		he, ok := err.(*httpError)
		if !ok || he.Status != 400 || he.Body.Field != tc.field || !strings.Contains(he.Body.Message, tc.msg) {
			t.Errorf("%s: %v, want a 400 on %s with %q", tc.name, err, tc.field, tc.msg)
		}
	}
}
