package zk

// Baton's patch (BATON_PATCH.md): the hand-written jute of jute.go against
// the reflective encoder and decoder, on twins of the structs that have no
// methods (so reflect walks them field by field, as before the patch). Go 1.13
// syntax: the module's go.mod says go 1.13.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

type (
	plainRequestHeader  struct{ Xid, Opcode int32 }
	plainResponseHeader struct {
		Xid  int32
		Zxid int64
		Err  ErrCode
	}
	plainMultiHeader struct {
		Type int32
		Done bool
		Err  ErrCode
	}
	plainCreate struct {
		Path  string
		Data  []byte
		Acl   []ACL
		Flags int32
	}
	plainSetData struct {
		Path    string
		Data    []byte
		Version int32
	}
	plainPathVersion struct {
		Path    string
		Version int32
	}
	plainStat Stat // Stat's fields, none of its methods
)

// reflectEncode is the reflective encoding of v (a pointer to a twin).
func reflectEncode(t *testing.T, v interface{}, size int) []byte {
	t.Helper()
	buf := make([]byte, size)
	n, err := encodePacket(buf, v)
	if err != nil {
		t.Fatalf("reflective encode of %T: %v", v, err)
	}
	return buf[:n]
}

// handEncode is e's encoding, also into every shorter buffer (each must be
// ErrShortBuffer, never a panic).
func handEncode(t *testing.T, e encoder, size int) []byte {
	t.Helper()
	buf := make([]byte, size)
	n, err := e.Encode(buf)
	if err != nil {
		t.Fatalf("%T.Encode: %v", e, err)
	}
	for short := 0; short < n; short++ {
		if _, err := e.Encode(make([]byte, short)); !errors.Is(err, ErrShortBuffer) {
			t.Fatalf("%T.Encode into %d of %d bytes: %v, want ErrShortBuffer", e, short, n, err)
		}
	}
	return buf[:n]
}

func checkEncode(t *testing.T, e encoder, twin interface{}) {
	t.Helper()
	size := 1 << 16
	if got, want := handEncode(t, e, size), reflectEncode(t, twin, size); !bytes.Equal(got, want) {
		t.Fatalf("%T.Encode = %x, reflect %x", e, got, want)
	}
}

// jute cases: the encoders against reflect for the given values.
func juteEncodeCases(t *testing.T, path string, data []byte, acl []ACL, i1, i2 int32, b bool) {
	checkEncode(t, &requestHeader{i1, i2}, &plainRequestHeader{i1, i2})
	checkEncode(t, &multiHeader{i1, b, ErrCode(i2)}, &plainMultiHeader{i1, b, ErrCode(i2)})
	checkEncode(t, &CreateRequest{path, data, acl, i1}, &plainCreate{path, data, acl, i1})
	checkEncode(t, &SetDataRequest{path, data, i2}, &plainSetData{path, data, i2})
	checkEncode(t, &DeleteRequest{path, i1}, &plainPathVersion{path, i1})
	checkEncode(t, &CheckVersionRequest{path, i2}, &plainPathVersion{path, i2})
	// a multi: each op's header and op, then the done header, as the
	// reflective encoding of the op structs wrote them
	ops := []interface{}{&CreateRequest{path, data, acl, i1}, &SetDataRequest{path, data, i2}, &DeleteRequest{path, i1}, &CheckVersionRequest{path, i2}}
	twins := []interface{}{&plainCreate{path, data, acl, i1}, &plainSetData{path, data, i2}, &plainPathVersion{path, i1}, &plainPathVersion{path, i2}}
	types := []int32{opCreate, opSetData, opDelete, opCheck}
	m := &multiRequest{}
	var want []byte
	for i, op := range ops {
		m.Ops = append(m.Ops, multiRequestOp{multiHeader{types[i], true, -1}, op}) // Done is cleared when encoded
		want = append(want, reflectEncode(t, &plainMultiHeader{types[i], false, -1}, 64)...)
		want = append(want, reflectEncode(t, twins[i], 1<<16)...)
	}
	want = append(want, reflectEncode(t, &plainMultiHeader{-1, true, -1}, 64)...)
	m.DoneHeader = multiHeader{-1, false, -1}
	if got := handEncode(t, m, 1<<18); !bytes.Equal(got, want) {
		t.Fatalf("multiRequest.Encode = %x, reflect %x", got, want)
	}
}

// reflectDecode is decodePacket on a twin, with upstream's panic on a bool
// past the end (an index, not a slice, out of range: decodePacket does not
// recover it) taken as the ErrShortBuffer the hand decoder answers.
func reflectDecode(b []byte, twin interface{}) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = 0, ErrShortBuffer
		}
	}()
	return decodePacket(b, twin)
}

// juteDecodeCases: the decoders against reflect on the same bytes, whole and
// cut short.
func juteDecodeCases(t *testing.T, raw []byte) {
	for cut := 0; cut <= len(raw); cut++ {
		b := raw[:cut:cut] // (the reflective decoder reads into a slice's capacity)
		var h responseHeader
		var ph plainResponseHeader
		n1, e1 := decodePacket(b, &h)
		n2, e2 := reflectDecode(b, &ph)
		if (e1 == nil) != (e2 == nil) || e1 == nil && (n1 != n2 || h != responseHeader(ph)) {
			t.Fatalf("responseHeader of %x: %v %d %+v, reflect %v %d %+v", b, e1, n1, h, e2, n2, ph)
		}
		var mh multiHeader
		var pmh plainMultiHeader
		n1, e1 = decodePacket(b, &mh)
		n2, e2 = reflectDecode(b, &pmh)
		if (e1 == nil) != (e2 == nil) || e1 == nil && (n1 != n2 || mh != multiHeader(pmh)) {
			t.Fatalf("multiHeader of %x: %v %d %+v, reflect %v %d %+v", b, e1, n1, mh, e2, n2, pmh)
		}
		var st Stat
		var pst plainStat
		n1, e1 = decodePacket(b, &st)
		n2, e2 = reflectDecode(b, &pst)
		if (e1 == nil) != (e2 == nil) || e1 == nil && (n1 != n2 || st != Stat(pst)) {
			t.Fatalf("Stat of %x: %v %d %+v, reflect %v %d %+v", b, e1, n1, st, e2, n2, pst)
		}
		for _, e := range []error{e1, e2} {
			if e != nil && !errors.Is(e, ErrShortBuffer) {
				t.Fatalf("decoding %x: %v, want ErrShortBuffer", b, e)
			}
		}
	}
}

// TestJuteMatchesReflect: the usual values and the edges (nil and empty
// data, no ACL, negative numbers, a path of every byte).
func TestJuteMatchesReflect(t *testing.T) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	acl := WorldACL(PermAll)
	for _, c := range []struct {
		path string
		data []byte
		acl  []ACL
	}{
		{"/baton/o/A_x_r_", []byte(`{"v":1}`), acl}, {"", nil, nil}, {"/x", []byte{}, []ACL{}},
		{string(every), every, append(acl, ACL{-1, "digest", "u:p"})},
	} {
		for _, n := range [][2]int32{{0, 0}, {-1, 1}, {1 << 30, -(1 << 31)}} {
			juteEncodeCases(t, c.path, c.data, c.acl, n[0], n[1], n[0] != 0)
		}
	}
	stat := make([]byte, 68)
	for i := range stat {
		stat[i] = byte(i*7 + 1)
	}
	juteDecodeCases(t, stat)
	juteDecodeCases(t, bytes.Repeat([]byte{0xff}, 70))
}

// TestMultiResponseDecode: a multi's answer of each op kind decodes to its
// parts; every answer cut short is ErrShortBuffer, never a panic.
func TestMultiResponseDecode(t *testing.T) {
	var b []byte
	hdr := func(typ int32, done bool, code int32) {
		b = binary.BigEndian.AppendUint32(b, uint32(typ))
		if done {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(code))
	}
	hdr(opCreate, false, 0)
	b = binary.BigEndian.AppendUint32(b, 9)
	b = append(b, "/o/A_x_01"...)
	hdr(opSetData, false, 0)
	for i := 0; i < 68; i++ {
		b = append(b, byte(i))
	}
	hdr(opDelete, false, 0)
	hdr(opCheck, false, 0)
	hdr(opError, false, 0)
	bad := int32(errBadVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(bad))
	hdr(-1, true, -1)
	var r multiResponse
	n, err := r.Decode(b)
	if n != len(b) || !errors.Is(err, ErrBadVersion) {
		t.Fatalf("Decode: %d of %d bytes, %v", n, len(b), err)
	}
	var want Stat
	if _, err := decodePacket(b[4+1+4+4+9+9:], (*plainStat)(&want)); err != nil {
		t.Fatal(err)
	}
	if len(r.Ops) != 5 || r.Ops[0].String != "/o/A_x_01" || r.Ops[1].Stat == nil || *r.Ops[1].Stat != want ||
		r.Ops[4].Err != errBadVersion || !r.DoneHeader.Done {
		t.Fatalf("Decode: %+v", r)
	}
	for cut := 0; cut < len(b); cut++ {
		var r multiResponse
		if _, err := r.Decode(b[:cut]); !errors.Is(err, ErrShortBuffer) {
			t.Fatalf("Decode of %d of %d bytes: %v, want ErrShortBuffer", cut, len(b), err)
		}
	}
}

// FuzzJute: the encoders and decoders against reflect on interface{} values.
func FuzzJute(f *testing.F) {
	f.Add("/baton/o/A_x_r_", []byte(`{"v":1}`), int32(1), int32(-1), true, "world", []byte{0, 0, 0, 1, 0xff})
	f.Add("", []byte(nil), int32(0), int32(0), false, "", []byte{})
	f.Fuzz(func(t *testing.T, path string, data []byte, i1, i2 int32, b bool, scheme string, raw []byte) {
		var acl []ACL
		if b {
			acl = []ACL{{i1, scheme, path}, {i2, path, scheme}}
		}
		juteEncodeCases(t, path, data, acl, i1, i2, b)
		if len(raw) > 200 {
			raw = raw[:200]
		}
		juteDecodeCases(t, raw)
		var r multiResponse
		_, _ = r.Decode(raw) // no panic on interface{} bytes
	})
}
