package lock

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The object node's data is written as encoding/json writes it, byte for
// byte, whatever the request ids and names hold.
func TestNativeDataMarshalAsJSON(t *testing.T) {
	names := []string{"A_x_r1_0000000001", "B_s_r~2_0000000002", `A_x_q"uote_0000000003`, "A_x_<tag>&_0000000004", "A_x_é_0000000005", "A_x_\x01\x7f_0000000006", "A_x_back\\slash_0000000007", "A_x_\u2028_0000000008"}
	cases := []nativeData{
		{},
		{X: 42},
		{H: []nativeHolder{{R: "r1"}}},
		{H: []nativeHolder{{R: "r1", S: true, T: 7}, {R: "r2", S: true}}, N: names[:2], X: -3},
		{N: names[:1]},
	}
	for _, nm := range names {
		cases = append(cases, nativeData{H: []nativeHolder{{R: nm, T: 1}}}, nativeData{H: []nativeHolder{{R: "r"}}, N: []string{"A_x_r_0000000001", nm}})
	}
	for _, d := range cases {
		got := d.marshal()
		d.V = 1
		want, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("marshal(%+v) = %s; encoding/json writes %s", d, got, want)
		}
		back, err := parseNativeData(got)
		if err != nil || back.V != 1 || len(back.H) != len(d.H) || len(back.N) != len(d.N) || back.X != d.X {
			t.Errorf("parseNativeData(%s) = %+v, %v", got, back, err)
		}
	}
}
