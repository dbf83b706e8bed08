package main

import (
	"math"
	"testing"
	"time"
)

// addWindows on a made-up native handoff across sidecars: the holder's
// connection (port 1) lists, then sends the release multi; the waiter's
// (port 2) gets the deletion event, reads the data; a ping is left out.
func TestAddWindowsSegments(t *testing.T) {
	const us = 1000
	pkts := []zkPkt{
		{ts: 50 * us, conn: 2, req: true, xid: 7, op: 4}, // before t0: not counted
		{ts: 110 * us, conn: 1, req: true, xid: 1, op: 12},
		{ts: 150 * us, conn: 1, xid: 1},
		{ts: 200 * us, conn: 1, req: true, xid: 2, op: 14},
		{ts: 250 * us, conn: 3, req: true, xid: -2, op: 11}, // ping
		{ts: 1100 * us, conn: 2, xid: -1, op: 2},            // deletion event
		{ts: 1120 * us, conn: 1, xid: 2},                    // the multi's answer
		{ts: 1300 * us, conn: 2, req: true, xid: 8, op: 4},
		{ts: 1700 * us, conn: 2, xid: 8},
	}
	reqs := []sidecarStamp{
		{method: "DELETE", path: "/v1/leases/x", recv: 160 * us, done: 1150 * us},
		{method: "POST", path: "/v1/locks/lock/acquire", recv: 10 * us, done: 1800 * us},
	}
	fr := &floorRun{segs: map[string][]int64{}, ops: map[string]int{}}
	addWindows(fr, pkts, [][2]int64{{100 * us, 2000 * us}}, reqs)
	want := map[string]int64{
		"a+. t0 → release write sent, after a listing by the releaser":              100 * us,
		"b. release write sent → answered (ZooKeeper write)":                        920 * us,
		"b2. release write answered → t1":                                           880 * us,
		"c. release write sent → deletion event on the wire":                        900 * us,
		"c2. deletion event → the successor's next request sent (its wake-up)":      200 * us,
		"d. deletion event → successor's last ZooKeeper answer":                     600 * us,
		"e. last ZooKeeper answer → t1 (sidecar's answer, client)":                  300 * us,
		"h1. t0 → the holder's sidecar has the release (client, HTTP request)":      60 * us,
		"h2. the holder's sidecar has the release → release write sent":             40 * us,
		"h3. the grant's last ZooKeeper answer → the waiter's sidecar has answered": 100 * us,
		"h4. the waiter's sidecar has answered → t1 (HTTP answer, client)":          200 * us,
		"t0 → t1 (W4's latency)":                                                    1900 * us,
	}
	for k, v := range want {
		if got := fr.segs[k]; len(got) != 1 || got[0] != v {
			t.Errorf("segment %q = %v, want [%d]", k, got, v)
		}
	}
	if len(fr.segs) != len(want) {
		t.Errorf("segments %v, want only %d", fr.segs, len(want))
	}
	wantOps := map[string]int{"H getChildren2": 1, "H multi": 1, "W getData": 1}
	for k, v := range wantOps {
		if fr.ops[k] != v {
			t.Errorf("ops[%q] = %d, want %d (all: %v)", k, fr.ops[k], v, fr.ops)
		}
	}
	if len(fr.ops) != len(wantOps) {
		t.Errorf("ops %v, want %v", fr.ops, wantOps)
	}
}

// parse finds the ZooKeeper frames in a captured lo packet: a request (a
// multi) and, in one segment, an answer followed by a watch event.
func TestWireParse(t *testing.T) {
	frame := func(sport, dport int, payload []byte) []byte {
		b := make([]byte, 14+20+20)
		b[12], b[13] = 0x08, 0x00 // IPv4
		ip := b[14:]
		ip[0] = 0x45
		total := 20 + 20 + len(payload)
		ip[2], ip[3] = byte(total>>8), byte(total)
		ip[9] = 6 // TCP
		tcp := ip[20:]
		tcp[0], tcp[1], tcp[2], tcp[3] = byte(sport>>8), byte(sport), byte(dport>>8), byte(dport)
		tcp[12] = 5 << 4
		return append(b, payload...)
	}
	be := func(vs ...int64) []byte { // 4-byte fields, except a 0x100000000 marker for an 8-byte zxid
		var out []byte
		for _, v := range vs {
			if v == 1<<32 {
				out = append(out, 0, 0, 0, 0, 0, 0, 0, 9)
				continue
			}
			out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		}
		return out
	}
	c := &wireCapture{port: 2181}
	req := append(be(12, 5, 14), 0, 0, 0, 0) // len 12: xid 5, op multi, 4 bytes of body
	c.parse(1, frame(40000, 2181, req))
	ans := append(be(16, 5), be(1<<32)...)
	ans = append(ans, be(0)...)            // xid 5, zxid, err 0
	ev := append(be(24, -1), be(1<<32)...) // xid -1, zxid, err 0, type 2, state 3
	ev = append(ev, be(0, 2, 3)...)
	c.parse(2, frame(2181, 40000, append(ans, ev...)))
	c.parse(3, frame(40000, 9999, req)) // another port: not ZooKeeper's
	got := c.take()
	want := []zkPkt{
		{ts: 1, conn: 40000, req: true, xid: 5, op: 14},
		{ts: 2, conn: 40000, xid: 5, op: 0},
		{ts: 2, conn: 40000, xid: -1, op: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// countWire: requests per opcode (pings by their xid), events, error
// answers and each connection's share, on made-up packets.
func TestCountWire(t *testing.T) {
	pkts := []zkPkt{
		{conn: 1, req: true, xid: 1, op: 1},   // create
		{conn: 1, xid: 1},                     // its answer, ok
		{conn: 1, req: true, xid: 2, op: 14},  // multi
		{conn: 1, xid: 2, op: -101},           // NoNode
		{conn: 2, req: true, xid: -2, op: 11}, // ping
		{conn: 2, xid: -2},                    // its answer
		{conn: 2, xid: -1, op: 2},             // deletion event
		{conn: 2, req: true, xid: 5, op: 4},   // getData
	}
	w := countWire(pkts)
	if w.RequestsTotal != 4 || w.Requests["create"] != 1 || w.Requests["multi"] != 1 || w.Requests["ping"] != 1 || w.Requests["getData"] != 1 {
		t.Errorf("requests %v (total %d), want create, multi, ping, getData once each", w.Requests, w.RequestsTotal)
	}
	if len(w.ErrorAnswers) != 1 || w.ErrorAnswers["-101"] != 1 {
		t.Errorf("error answers %v, want -101 once", w.ErrorAnswers)
	}
	if len(w.Events) != 1 || w.Events["event2"] != 1 {
		t.Errorf("events %v, want event2 once", w.Events)
	}
	if c1, c2 := w.Connections["1"], w.Connections["2"]; c1["create"] != 1 || c1["multi"] != 1 || len(c1) != 2 ||
		c2["ping"] != 1 || c2["event2"] != 1 || c2["getData"] != 1 || len(c2) != 3 {
		t.Errorf("per connection %v", w.Connections)
	}
}

// TestPeerFloors: W1's floors are two release-shaped multis and two round
// trips over the peer's cycle; W2 shared's is the rate of one parked
// multi and a Go round trip per acquisition over the peer's rate.
func TestPeerFloors(t *testing.T) {
	us := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Microsecond
		}
		return d
	}
	prim := map[string][]time.Duration{
		primMulti:   us(400, 450, 500),
		primParked:  us(480, 520, 560),
		primRTStock: us(100, 120, 140),
		primRTGo:    us(60, 80, 100),
	}
	got := peerFloors(prim, 1000, 1200)
	want := []struct{ us, ratio float64 }{
		{2*450 + 2*120, (2*450 + 2*120) / 1000.0},
		{2*450 + 2*80, (2*450 + 2*80) / 1000.0},
		{520 + 80, 1e6 / 600 / 1200},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if math.Abs(got[i].us-w.us) > 0.5 || math.Abs(got[i].ratio-w.ratio) > 1e-3 {
			t.Errorf("%s: %.1f µs, %.3f×; want %.1f, %.3f", got[i].goal, got[i].us, got[i].ratio, w.us, w.ratio)
		}
	}
}
