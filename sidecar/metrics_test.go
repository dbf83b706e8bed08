package sidecar_test

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// sample returns the sample of family name whose labels include the given
// "k=v" pairs, or nil.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// TestMetricsCountWhatHappened: acquire results and wait times by type
// and result (a try-once refused is not_granted, a wait that ran out is
// timeout), hold times by type and how the lease ended, API waiters by
// type, and session gauges that agree, parsed from /metrics with expfmt.
func TestMetricsCountWhatHappened(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "sc-m"))
	fams := s.metrics()
	// Every series exists before anything happened.
	for _, typ := range []string{"foreground", "background"} {
		for _, r := range []string{"granted", "not_granted", "timeout", "unavailable", "too_many_waiters", "shutting_down", "canceled", "error"} {
			if m := sample(fams, "baton_lock_acquire_seconds", "type="+typ, "result="+r); m == nil || m.GetHistogram().GetSampleCount() != 0 {
				t.Errorf("baton_lock_acquire_seconds{type=%s,result=%s} at start = %v, want 0", typ, r, m)
			}
		}
		if m := sample(fams, "baton_lock_hold_seconds", "type="+typ, "result=released"); m == nil || m.GetHistogram().GetSampleCount() != 0 {
			t.Errorf("baton_lock_hold_seconds{type=%s,result=released} at start = %v, want 0", typ, m)
		}
	}

	l1 := s.acquire("mc1", "")                                          // foreground granted
	s.mustCall(423, "POST", "/v1/locks/mc1/acquire", `{"wait_ms":0}`)   // foreground not_granted
	s.mustCall(423, "POST", "/v1/locks/mc1/acquire", `{"wait_ms":300}`) // foreground timeout
	l2 := s.acquire("mc2", `{"type":"background","lease_ms":200}`)      // background granted, then expires
	time.Sleep(100 * time.Millisecond)
	s.release(l1.LeaseID) // foreground released after >= 100 ms

	// A background waiter behind a foreground holder.
	l3 := s.acquire("mc3", "") // foreground granted
	waited := make(chan []byte, 1)
	go func() {
		_, b := s.call("POST", "/v1/locks/mc3/acquire", `{"type":"background","wait_ms":10000}`)
		waited <- b
	}()
	waitFor(t, 10*time.Second, "one background waiter", func() bool {
		return s.metric("baton_acquires_waiting", "type=background") == 1
	})
	if fg := s.metric("baton_acquires_waiting", "type=foreground"); fg != 0 {
		t.Errorf("baton_acquires_waiting{type=foreground} = %v while only a background acquire waits", fg)
	}
	s.release(l3.LeaseID)
	l4 := decodeLease(t, <-waited) // background granted
	s.release(l4.LeaseID)
	waitFor(t, 10*time.Second, "the short lease expired", func() bool {
		st, _ := s.call("GET", "/v1/leases/"+l2.LeaseID, "")
		return st == 410
	})

	fams = s.metrics()
	count := func(name string, labels ...string) float64 {
		m := sample(fams, name, labels...)
		if m == nil {
			return -1
		}
		if h := m.GetHistogram(); h != nil {
			return float64(h.GetSampleCount())
		}
		return m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"baton_lock_acquire_seconds", []string{"type=foreground", "result=granted"}, 2},
		{"baton_lock_acquire_seconds", []string{"type=foreground", "result=not_granted"}, 1},
		{"baton_lock_acquire_seconds", []string{"type=foreground", "result=timeout"}, 1},
		{"baton_lock_acquire_seconds", []string{"type=background", "result=granted"}, 2},
		{"baton_lock_acquire_seconds", []string{"type=background", "result=timeout"}, 0},
		{"baton_lock_hold_seconds", []string{"type=foreground", "result=released"}, 2},
		{"baton_lock_hold_seconds", []string{"type=background", "result=released"}, 1},
		{"baton_lock_hold_seconds", []string{"type=background", "result=expired"}, 1},
		{"baton_lock_hold_seconds", []string{"type=foreground", "result=expired"}, 0},
		{"baton_acquires_waiting", []string{"type=foreground"}, 0},
		{"baton_acquires_waiting", []string{"type=background"}, 0},
		{"baton_leases_total", []string{"result=granted"}, 4},
	} {
		if got := count(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if sum := sample(fams, "baton_lock_acquire_seconds", "type=foreground", "result=timeout").GetHistogram().GetSampleSum(); sum < 0.3 {
		t.Errorf("timeout wait observed %vs, want >= 0.3 (wait_ms 300)", sum)
	}
	if sum := sample(fams, "baton_lock_hold_seconds", "type=foreground", "result=released").GetHistogram().GetSampleSum(); sum < 0.1 {
		t.Errorf("foreground hold time %vs, want >= 0.1", sum)
	}
	if sum := sample(fams, "baton_lock_hold_seconds", "type=background", "result=expired").GetHistogram().GetSampleSum(); sum < 0.2 {
		t.Errorf("expired background hold time %vs, want >= 0.2 (lease_ms 200)", sum)
	}

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"baton_zk_connected", nil, 1},
		{"baton_zk_session_state", []string{"state=connected"}, 1},
		{"baton_zk_session_state", []string{"state=disconnected"}, 0},
		{"baton_zk_session_state", []string{"state=expired"}, 0},
		{"baton_zk_session_timeout_seconds", nil, 4},
		{"baton_zk_disconnected_seconds", nil, 0},
		{"baton_zk_connect_failing", nil, 0},
	} {
		if got := count(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestMetricsZooKeeperDown: without ZooKeeper the session gauges agree
// (not connected, state disconnected, nothing else 1), the connection
// failure and its duration show, and an acquire that cannot reach
// ZooKeeper counts as unavailable.
func TestMetricsZooKeeperDown(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "sc-down")
	cfg.ZKServers = []string{"127.0.0.1:1"}
	s := startNoWait(t, cfg)
	waitFor(t, 10*time.Second, "the connection failure", func() bool { return s.metric("baton_zk_connect_failing") == 1 })
	s.mustCall(503, "POST", "/v1/locks/d1/acquire", `{"type":"background","wait_ms":200}`)
	fams := s.metrics()
	var ones float64
	for _, m := range fams["baton_zk_session_state"].GetMetric() {
		ones += m.GetGauge().GetValue()
	}
	if ones != 1 {
		t.Errorf("baton_zk_session_state has %v states at 1, want exactly 1", ones)
	}
	if c, st := sample(fams, "baton_zk_connected").GetGauge().GetValue(), sample(fams, "baton_zk_session_state", "state=connected").GetGauge().GetValue(); c != 0 || st != 0 {
		t.Errorf("baton_zk_connected %v, session_state{connected} %v; want 0 and 0", c, st)
	}
	if v := sample(fams, "baton_zk_session_state", "state=disconnected").GetGauge().GetValue(); v != 1 {
		t.Errorf("session_state{disconnected} = %v, want 1", v)
	}
	if v := sample(fams, "baton_zk_disconnected_seconds").GetGauge().GetValue(); v <= 0 {
		t.Errorf("baton_zk_disconnected_seconds = %v, want > 0", v)
	}
	if n := sample(fams, "baton_lock_acquire_seconds", "type=background", "result=unavailable").GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("acquire result unavailable counted %d times, want 1", n)
	}
}
