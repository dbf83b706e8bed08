package lock

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"path"
	"testing"

	"github.com/go-zookeeper/zk"
)

// reviewDrainStrings are adversarial strings for the object's data: every
// byte JSON escapes or HTML-escapes, invalid UTF-8, U+2028/2029, DEL, the
// empty string.
var reviewDrainStrings = []string{"", "r", "A_x_r1_0000000001", `"`, `\`, `\"`, "<", ">", "&", "\x00", "\x1f", "\x7f", "\x80",
	"\xff\xfe", "é", "\u2028", "\u2029", "\ufffd", "a\tb", "a\nb", "\u00e9\x80", "~1", "}", "]", ",", ":", "null", "💥"}

// reviewDrainCheck fails t unless d.marshal() is encoding/json's encoding
// of d (with V 1), byte for byte, and parses back to d.
func reviewDrainCheck(t *testing.T, d nativeData) {
	t.Helper()
	got := d.marshal()
	d.V = 1
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("marshal(%#v) = %q; encoding/json writes %q", d, got, want)
	}
	// (size() is a capacity hint, not a bound: with a 19-digit X and
	// empty names it is a few bytes short, which costs one growth.)
	back, err := parseNativeData(got)
	if err != nil || back.V != 1 || len(back.H) != len(d.H) || len(back.N) != len(d.N) || back.X != d.X {
		t.Fatalf("parseNativeData(%q) = %#v, %v", got, back, err)
	}
}

// TestReviewDrainMarshalRandom: random nativeData built from adversarial
// strings, tokens (zero, negative, extremes) and empty/nil slices encode
// as encoding/json does. 20,000 cases from a fixed seed.
func TestReviewDrainMarshalRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	toks := []int64{0, 1, -1, 42, -9223372036854775808, 9223372036854775807, 1 << 53}
	str := func() string {
		var b []byte
		for range r.IntN(4) {
			if r.IntN(3) == 0 {
				b = append(b, byte(r.IntN(256)))
			} else {
				b = append(b, reviewDrainStrings[r.IntN(len(reviewDrainStrings))]...)
			}
		}
		return string(b)
	}
	for range 20000 {
		var d nativeData
		d.V = r.IntN(3) - 1 // marshal sets it to 1 whatever it was
		switch r.IntN(3) {
		case 0: // nil
		case 1:
			d.H = []nativeHolder{}
		default:
			for range 1 + r.IntN(4) {
				d.H = append(d.H, nativeHolder{R: str(), S: r.IntN(2) == 0, T: toks[r.IntN(len(toks))]})
			}
		}
		switch r.IntN(3) {
		case 0:
		case 1:
			d.N = []string{}
		default:
			for range 1 + r.IntN(70) {
				d.N = append(d.N, str())
			}
		}
		d.X = toks[r.IntN(len(toks))]
		reviewDrainCheck(t, d)
	}
}

// FuzzReviewDrainMarshal: the same, for go test -fuzz.
func FuzzReviewDrainMarshal(f *testing.F) {
	for _, s := range reviewDrainStrings {
		f.Add(s, s, true, int64(0), int64(-1))
	}
	f.Fuzz(func(t *testing.T, r, n string, s bool, tok, x int64) {
		reviewDrainCheck(t, nativeData{H: []nativeHolder{{R: r, S: s, T: tok}, {R: n}}, N: []string{n, r, ""}, X: x})
		reviewDrainCheck(t, nativeData{N: []string{n}})
		reviewDrainCheck(t, nativeData{H: []nativeHolder{{R: r, T: tok}}})
	})
}

// PlantNativeTwin creates, through the engine's own session, a foreground
// exclusive native child of object named (and whose data is) as a child of
// request reqID: what a create that landed twice would leave. It returns
// its name.
func PlantNativeTwin(ctx context.Context, e *Engine, object, reqID string) (string, error) {
	name, err := EscapeObject(object)
	if err != nil {
		return "", err
	}
	s, err := e.connectedSession(ctx)
	if err != nil {
		return "", err
	}
	data, _ := json.Marshal(nodeData{V: 1, Req: reqID, Sidecar: e.opts.NodeID, Type: "foreground"})
	p, err := s.conn.Create(e.root+"/"+name+"/"+e.nativePrefix(Foreground, false, reqID), data, zk.FlagEphemeralSequential, e.acl)
	return path.Base(p), err
}
