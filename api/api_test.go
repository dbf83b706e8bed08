package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTimeJSON(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	for _, c := range []struct {
		in   api.Time
		want string
	}{
		{api.NewTime(time.Date(2025, 1, 2, 15, 4, 5, 123456789, loc)), `"2025-01-02T14:04:05.123Z"`},
		{api.NewTime(time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)), `"2025-01-02T15:04:05.000Z"`},
		{api.Time{}, `null`},
	} {
		b, err := json.Marshal(c.in)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%v) = %s, %v, want %s", c.in, b, err, c.want)
		}
		var back api.Time
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(c.in.Truncate(time.Millisecond)) {
			t.Errorf("Unmarshal(%s) = %v, %v, want %v", b, back, err, c.in)
		}
	}
	var bad api.Time
	for _, in := range []string{`"yesterday"`, `5`, `"2025-01-02"`, `"2025-01-02T15:04:05Z\"`} {
		if err := json.Unmarshal([]byte(in), &bad); err == nil {
			t.Errorf("Unmarshal(%s): no error", in)
		}
	}
	// A string with escapes takes json's own decoding (an escaped "Z", a
	// zone written "\u002b01:00"); a plain one is read without it: the
	// same time either way.
	want := time.Date(2025, 1, 2, 14, 4, 5, 123000000, time.UTC)
	for _, in := range []string{`"2025-01-02T14:04:05.123Z"`, `"2025-01-02T14:04:05.123\u005a"`, `"2025-01-02T15:04:05.123\u002b01:00"`} {
		var got api.Time
		if err := got.UnmarshalJSON([]byte(in)); err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("UnmarshalJSON(%s) = %v, %v, want %v", in, got, err, want)
		}
	}
}

func TestLeaseJSON(t *testing.T) {
	l := api.Lease{LeaseID: "i.r", Token: 1<<62 + 1, State: api.StateHeld}
	b, _ := json.Marshal(l)
	if !strings.Contains(string(b), `"token":"4611686018427387905"`) {
		t.Errorf("token not a JSON string: %s", b)
	}
	var back api.Lease
	if err := json.Unmarshal(b, &back); err != nil || back.Token != l.Token {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if strings.Contains(string(b), "reason") {
		t.Errorf("empty reason written: %s", b)
	}
}

func TestErrorJSON(t *testing.T) {
	w, p := int64(0), 1
	for _, c := range []struct {
		name string
		in   api.Error
		want string
	}{
		{"423 without holder", api.Error{Kind: api.InstanceLockException, Message: "m", Object: "o", Type: "foreground", WaitedMS: &w, Position: &p},
			`{"error":"InstanceLockException","message":"m","object":"o","type":"foreground","waited_ms":0,"position":1,"holder":null}`},
		{"400", api.Error{Kind: api.BadRequest, Message: "wait_ms: bad", Field: "wait_ms"},
			`{"error":"BadRequest","message":"wait_ms: bad","field":"wait_ms"}`},
		{"410", api.Error{Kind: api.LockLost, Message: "m", Reason: api.ReasonLeaseExpired},
			`{"error":"LockLost","message":"m","reason":"lease expired"}`},
	} {
		b, err := json.Marshal(c.in)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s, %v\nwant %s", c.name, b, err, c.want)
		}
		var back api.Error
		if err := json.Unmarshal(b, &back); err != nil || back.Kind != c.in.Kind || back.Message != c.in.Message {
			t.Errorf("%s: round trip %+v, %v", c.name, back, err)
		}
	}
}

// TestErrorBoundsJSON: the bounds of a millisecond field out of range
// travel as min_ms and max_ms (0 is a bound, written), are left out when
// not set, and read back as they were written.
func TestErrorBoundsJSON(t *testing.T) {
	lo, hi := int64(0), int64(600000)
	in := api.Error{Kind: api.BadRequest, Message: "wait_ms: out of range", Field: "wait_ms", MinMS: &lo, MaxMS: &hi}
	b, err := json.Marshal(in)
	want := `{"error":"BadRequest","message":"wait_ms: out of range","field":"wait_ms","min_ms":0,"max_ms":600000}`
	if err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v; want %s", b, err, want)
	}
	var back api.Error
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.MinMS == nil || back.MaxMS == nil || *back.MinMS != lo || *back.MaxMS != hi || back.Field != "wait_ms" {
		t.Errorf("round trip: %+v (min %v, max %v)", back, back.MinMS, back.MaxMS)
	}
	b, _ = json.Marshal(api.Error{Kind: api.BadRequest, Message: "m", Field: "type"})
	if strings.Contains(string(b), "_ms") {
		t.Errorf("bounds written when not set: %s", b)
	}
}

func TestStatus(t *testing.T) {
	for kind, want := range map[string]int{
		api.BadRequest: 400, api.NoNode: 404, api.NotFound: 404, api.MethodNotAllowed: 405, api.Conflict: 409,
		api.LockLost: 410, api.PayloadTooLarge: 413, api.InstanceLockException: 423, api.ZooKeeperUnavailable: 503,
		api.TooManyWaiters: 503, api.ShuttingDown: 503, api.QueueUnavailable: 503, api.QueueFull: 503, api.OpsDisabled: 503,
		api.InternalError: 500, "Bogus": 500,
	} {
		if got := api.Status(kind); got != want {
			t.Errorf("Status(%q) = %d, want %d", kind, got, want)
		}
	}
}
