package sidecar

import (
	"bytes"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
)

// The lease's hand-appended JSON (leaseJSON) is byte for byte what
// encoding/json writes for it, through WriteJSON (headers and newline
// included), on random leases: every optional field set or not, strings
// that need escaping (quotes, controls, HTML, non-ASCII, invalid UTF-8,
// U+2028), times zero, in other zones, below the millisecond, before 1970.
func TestLeaseJSONMatchesEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "orders/42", "lease-7f3a", `quote"back\slash`, "tab\tnl\ncr\r\b\f\x00\x1f",
		"<script>&amp;</script>", "grüße 漢字 🙂", "bad\xffutf8\xc3", "line\u2028sep\u2029", "\x7f del", "A-0000000042",
		"a<b", "a>b", "a&b", `a"b`, `a\b`, "a\x01b", "a\x1fb", "é", "a\u2028"} // one hazard each
	zone := time.FixedZone("X", -7*3600-30*60)
	times := []time.Time{{}, time.Date(2026, 11, 27, 14, 0, 0, 999_999_999, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 500_000, zone), time.Unix(0, 1), time.Date(9999, 1, 2, 3, 4, 5, 6, time.UTC),
		time.Now(), time.Now().In(zone)}
	str := func() string { return strs[r.IntN(len(strs))] }
	tm := func() api.Time { return api.Time{Time: times[r.IntN(len(times))]} }
	i64 := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int64()
		}
		return r.Int64N(1 << 40)
	}
	maybe := func() bool { return r.IntN(2) == 0 }
	for i := range 2000 {
		l := api.Lease{
			LeaseID: str(), Object: str(), Type: str(), Info: str(), Token: i64(), Node: str(),
			AcquiredAt: tm(), LeaseExpiresAt: tm(), ValidUntil: tm(), ValidForMS: i64(), State: str(),
			WaitedMS: i64(), Reason: str(), DrainForMS: i64(), Holds: int(i64() % 1000), Preemptible: maybe(),
			CleanupMS: i64(), Semaphore: str(), Mode: str(),
		}
		if maybe() {
			d := tm()
			l.DrainEndsAt = &d
		}
		if maybe() {
			u := r.Uint32()
			l.UID = &u
		}
		if maybe() {
			p := int32(r.Uint32())
			l.PID = &p
		}
		if maybe() {
			p := int(i64() % 100)
			l.Permit = &p
		}
		if i%50 == 0 { // left to encoding/json
			l.Objects = []api.LeaseObject{{Object: str(), Token: i64(), Node: str()}}
		}
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		httpapi.WriteJSON(want, 200, l)
		httpapi.WriteJSON(got, 200, (*leaseJSON)(&l))
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Fatalf("lease %d:\n got %s\nwant %s", i, got.Body.Bytes(), want.Body.Bytes())
		}
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if got.Header().Get(h) != want.Header().Get(h) {
				t.Fatalf("%s: got %q, want %q", h, got.Header().Get(h), want.Header().Get(h))
			}
		}
	}
}

// BenchmarkLeaseJSON: a typical lease answer, hand-appended and by
// encoding/json.
func BenchmarkLeaseJSON(b *testing.B) {
	now := api.Time{Time: time.Now()}
	l := api.Lease{LeaseID: "0f3a9c2d7e1b4a5c", Object: "orders/42", Type: "foreground", Token: 4294967342,
		Node: "A-0000000042", AcquiredAt: now, LeaseExpiresAt: now, ValidUntil: now, ValidForMS: 14000,
		State: "held", Holds: 1, Mode: "exclusive"}
	for _, c := range []struct {
		name string
		v    any
	}{{"appended", (*leaseJSON)(&l)}, {"encoding-json", l}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				httpapi.WriteJSON(httptest.NewRecorder(), 200, c.v)
			}
		})
	}
}

// FuzzAppendTime: appendTime writes api.Time's MarshalJSON, for any
// instant (years before 0 and after 9999 included) in any zone.
func FuzzAppendTime(f *testing.F) {
	for _, s := range []int64{0, 1, -1, 999_999, 1_795_857_824_763_607_572, -62_135_596_800_000_000_000 / 1000} {
		f.Add(s/1e9, s%1e9, int32(0))
	}
	f.Add(int64(253402300799), int64(999_999_999), int32(3600)) // 9999-12-31T23:59:59.999
	f.Add(int64(253402300800), int64(0), int32(-1800))          // 10000-01-01
	f.Add(int64(-62135596801), int64(999_000_000), int32(0))    // 0000-12-31 BC
	f.Add(int64(-62167219200), int64(0), int32(0))              // year 0
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int32) {
		tm := api.Time{Time: time.Unix(sec, nsec).In(time.FixedZone("Z", int(offset%86400)))}
		want, err := tm.MarshalJSON()
		if err != nil {
			t.Skip()
		}
		if got := appendTime(nil, tm); !bytes.Equal(got, want) {
			t.Fatalf("appendTime(%v) = %s, MarshalJSON %s", tm.Time, got, want)
		}
	})
}

// FuzzReleaseJSON: the release's hand-appended answer (releaseJSON) is
// byte for byte what encoding/json writes for it, through WriteJSON, for
// any object name (escapes, invalid UTF-8), token and hold count.
func FuzzReleaseJSON(f *testing.F) {
	for _, s := range []string{"", "orders/42", `quote"back\slash`, "tab\tnl\n\x00", "<a>&", "grüße 🙂", "bad\xffutf8", "line\u2028sep"} {
		f.Add(true, false, s, int64(4294967342), 0)
		f.Add(false, true, s, int64(-1), 3)
	}
	f.Fuzz(func(t *testing.T, released, releasing bool, object string, token int64, holds int) {
		r := api.ReleaseResponse{Released: released, Releasing: releasing, Object: object, Token: token, Holds: holds}
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		httpapi.WriteJSON(want, 200, r)
		httpapi.WriteJSON(got, 200, (*releaseJSON)(&r))
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Fatalf("\n got %s\nwant %s", got.Body.Bytes(), want.Body.Bytes())
		}
	})
}
