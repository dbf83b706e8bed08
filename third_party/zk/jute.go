package zk

// Baton's patch (BATON_PATCH.md): the jute encoding of the structs on a
// lock's request path written out by hand — the request and response
// headers, a multi's header and its create, setData, delete and check ops,
// a create's answer and a Stat — instead of walking each struct with
// reflect. The bytes are the reflective encoder's (TestJuteMatchesReflect,
// FuzzJute compare them). A buffer too short is ErrShortBuffer, as the
// reflective encoder's recovered panic is.

import (
	"encoding/binary"
)

// juteW writes jute into b; short is set (and nothing more written) once
// b has no room.
type juteW struct {
	b     []byte
	n     int
	short bool
}

func (w *juteW) room(k int) bool {
	if w.short || len(w.b)-w.n < k {
		w.short = true
		return false
	}
	return true
}

func (w *juteW) i32(v int32) {
	if w.room(4) {
		binary.BigEndian.PutUint32(w.b[w.n:], uint32(v))
		w.n += 4
	}
}

func (w *juteW) i64(v int64) {
	if w.room(8) {
		binary.BigEndian.PutUint64(w.b[w.n:], uint64(v))
		w.n += 8
	}
}

func (w *juteW) boolean(v bool) {
	if w.room(1) {
		w.b[w.n] = 0
		if v {
			w.b[w.n] = 1
		}
		w.n++
	}
}

func (w *juteW) str(s string) {
	if w.room(4 + len(s)) {
		binary.BigEndian.PutUint32(w.b[w.n:], uint32(len(s)))
		w.n += 4 + copy(w.b[w.n+4:], s)
	}
}

// buffer writes a byte slice: -1 for nil, as the reflective encoder does.
func (w *juteW) buffer(p []byte) {
	if p == nil {
		w.i32(-1)
		return
	}
	if w.room(4 + len(p)) {
		binary.BigEndian.PutUint32(w.b[w.n:], uint32(len(p)))
		w.n += 4 + copy(w.b[w.n+4:], p)
	}
}

func (w *juteW) acls(acl []ACL) {
	w.i32(int32(len(acl)))
	for _, a := range acl {
		w.i32(a.Perms)
		w.str(a.Scheme)
		w.str(a.ID)
	}
}

func (w *juteW) done() (int, error) {
	if w.short {
		return w.n, ErrShortBuffer
	}
	return w.n, nil
}

// juteR reads jute from b; short is set once b ends too soon.
type juteR struct {
	b     []byte
	n     int
	short bool
}

func (r *juteR) has(k int) bool {
	if r.short || k < 0 || len(r.b)-r.n < k {
		r.short = true
		return false
	}
	return true
}

func (r *juteR) i32() int32 {
	if !r.has(4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b[r.n:]))
	r.n += 4
	return v
}

func (r *juteR) i64() int64 {
	if !r.has(8) {
		return 0
	}
	v := int64(binary.BigEndian.Uint64(r.b[r.n:]))
	r.n += 8
	return v
}

func (r *juteR) boolean() bool {
	if !r.has(1) {
		return false
	}
	v := r.b[r.n] != 0
	r.n++
	return v
}

// str reads a string; its length is unsigned, as the reflective decoder
// reads it (a -1 is a length no buffer has: short).
func (r *juteR) str() string {
	if !r.has(4) {
		return ""
	}
	ln := int(binary.BigEndian.Uint32(r.b[r.n:]))
	if !r.has(4 + ln) {
		return ""
	}
	s := string(r.b[r.n+4 : r.n+4+ln])
	r.n += 4 + ln
	return s
}

func (r *juteR) done() (int, error) {
	if r.short {
		return r.n, ErrShortBuffer
	}
	return r.n, nil
}

func (h *requestHeader) Encode(buf []byte) (int, error) {
	w := juteW{b: buf}
	w.i32(h.Xid)
	w.i32(h.Opcode)
	return w.done()
}

func (h *responseHeader) Decode(buf []byte) (int, error) {
	r := juteR{b: buf}
	h.Xid, h.Zxid, h.Err = r.i32(), r.i64(), ErrCode(r.i32())
	return r.done()
}

func (h *multiHeader) Encode(buf []byte) (int, error) {
	w := juteW{b: buf}
	w.i32(h.Type)
	w.boolean(h.Done)
	w.i32(int32(h.Err))
	return w.done()
}

func (h *multiHeader) Decode(buf []byte) (int, error) {
	r := juteR{b: buf}
	h.Type, h.Done, h.Err = r.i32(), r.boolean(), ErrCode(r.i32())
	return r.done()
}

func (q *CreateRequest) Encode(buf []byte) (int, error) {
	w := juteW{b: buf}
	w.str(q.Path)
	w.buffer(q.Data)
	w.acls(q.Acl)
	w.i32(q.Flags)
	return w.done()
}

func (q *SetDataRequest) Encode(buf []byte) (int, error) {
	w := juteW{b: buf}
	w.str(q.Path)
	w.buffer(q.Data)
	w.i32(q.Version)
	return w.done()
}

func (q *DeleteRequest) Encode(buf []byte) (int, error) {
	w := juteW{b: buf}
	w.str(q.Path)
	w.i32(q.Version)
	return w.done()
}

func (q *CheckVersionRequest) Encode(buf []byte) (int, error) {
	w := juteW{b: buf}
	w.str(q.Path)
	w.i32(q.Version)
	return w.done()
}

func (s *Stat) Decode(buf []byte) (int, error) {
	r := juteR{b: buf}
	s.Czxid, s.Mzxid, s.Ctime, s.Mtime = r.i64(), r.i64(), r.i64(), r.i64()
	s.Version, s.Cversion, s.Aversion = r.i32(), r.i32(), r.i32()
	s.EphemeralOwner = r.i64()
	s.DataLength, s.NumChildren = r.i32(), r.i32()
	s.Pzxid = r.i64()
	return r.done()
}
