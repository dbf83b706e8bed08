package lock

import (
	"bytes"
	"encoding/json"
	"testing"
)

// nodeDataCheck fails t unless d.marshal() is json.Marshal(d), byte for byte.
func nodeDataCheck(t *testing.T, d nodeData) {
	t.Helper()
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.marshal(); !bytes.Equal(got, want) {
		t.Fatalf("nodeData.marshal(%+v) = %s, json.Marshal %s", d, got, want)
	}
}

// FuzzNodeDataMarshal: a child's data, written by hand on the usual path,
// is encoding/json's encoding for every string (reviewDrainStrings: the
// escapes, HTML characters, invalid UTF-8), with and without the optional
// fields, and with a signal or asks (encoding/json's path).
func FuzzNodeDataMarshal(f *testing.F) {
	for _, s := range reviewDrainStrings {
		f.Add(s, s, s, int64(-1), int64(0), true)
	}
	f.Add("0123456789abcdef0123456789abcdef", "node-1", "job 7", int64(5000), int64(60000), false)
	f.Fuzz(func(t *testing.T, req, sidecar, info string, cleanup, age int64, withCleanup bool) {
		for _, typ := range []string{"foreground", "background", info} {
			d := nodeData{V: 1, Req: req, Sidecar: sidecar, Type: typ, Info: info, AgeMs: age}
			nodeDataCheck(t, d)
			if withCleanup {
				d.Cleanup = &cleanup
				nodeDataCheck(t, d)
			}
			d.Signal = &Signal{}
			nodeDataCheck(t, d)
			d.Signal, d.Asks = nil, []Signal{{}}
			nodeDataCheck(t, d)
		}
	})
}
