package sidecar

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/api"
)

// leaseJSON is an api.Lease answered with its JSON appended by hand
// (httpapi.Appender): encoding/json's reflection over the lease was about
// 6 % of the sidecar's CPU in W1 (an acquire and a release). The bytes are
// encoding/json's, field for field (TestLeaseJSONMatchesEncoding); a lease
// of a set of objects (Objects) is left to encoding/json.
type leaseJSON api.Lease

// AppendJSON implements httpapi.Appender.
func (l *leaseJSON) AppendJSON(b []byte) ([]byte, bool) {
	if len(l.Objects) > 0 {
		return b, false
	}
	b = append(b, `{"lease_id":`...)
	b = appendString(b, l.LeaseID)
	b = append(b, `,"object":`...)
	b = appendString(b, l.Object)
	b = append(b, `,"type":`...)
	b = appendString(b, l.Type)
	b = append(b, `,"info":`...)
	b = appendString(b, l.Info)
	b = append(b, `,"token":"`...)
	b = strconv.AppendInt(b, l.Token, 10)
	b = append(b, `","node":`...)
	b = appendString(b, l.Node)
	b = append(b, `,"acquired_at":`...)
	b = appendTime(b, l.AcquiredAt)
	b = append(b, `,"lease_expires_at":`...)
	b = appendTime(b, l.LeaseExpiresAt)
	b = append(b, `,"valid_until":`...)
	b = appendTime(b, l.ValidUntil)
	b = append(b, `,"valid_for_ms":`...)
	b = strconv.AppendInt(b, l.ValidForMS, 10)
	b = append(b, `,"state":`...)
	b = appendString(b, l.State)
	b = append(b, `,"waited_ms":`...)
	b = strconv.AppendInt(b, l.WaitedMS, 10)
	if l.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, l.Reason)
	}
	if l.DrainEndsAt != nil {
		b = append(b, `,"drain_ends_at":`...)
		b = appendTime(b, *l.DrainEndsAt)
	}
	if l.DrainForMS != 0 {
		b = append(b, `,"drain_for_ms":`...)
		b = strconv.AppendInt(b, l.DrainForMS, 10)
	}
	b = append(b, `,"holds":`...)
	b = strconv.AppendInt(b, int64(l.Holds), 10)
	if l.Preemptible {
		b = append(b, `,"preemptible":true`...)
	}
	if l.CleanupMS != 0 {
		b = append(b, `,"cleanup_ms":`...)
		b = strconv.AppendInt(b, l.CleanupMS, 10)
	}
	if l.UID != nil {
		b = append(b, `,"uid":`...)
		b = strconv.AppendUint(b, uint64(*l.UID), 10)
	}
	if l.PID != nil {
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(*l.PID), 10)
	}
	if l.Semaphore != "" {
		b = append(b, `,"semaphore":`...)
		b = appendString(b, l.Semaphore)
	}
	if l.Permit != nil {
		b = append(b, `,"permit":`...)
		b = strconv.AppendInt(b, int64(*l.Permit), 10)
	}
	if l.Mode != "" {
		b = append(b, `,"mode":`...)
		b = appendString(b, l.Mode)
	}
	return append(b, '}'), true
}

// releaseJSON is an api.ReleaseResponse answered with its JSON appended by
// hand (httpapi.Appender), as leaseJSON: encoding/json's reflection over
// the release's answer was about 1 % of a W1 cycle's CPU. The bytes are
// encoding/json's (TestReleaseJSONMatchesEncoding).
type releaseJSON api.ReleaseResponse

// AppendJSON implements httpapi.Appender.
func (r *releaseJSON) AppendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"released":`...)
	b = strconv.AppendBool(b, r.Released)
	if r.Releasing {
		b = append(b, `,"releasing":true`...)
	}
	b = append(b, `,"object":`...)
	b = appendString(b, r.Object)
	b = append(b, `,"token":"`...)
	b = strconv.AppendInt(b, r.Token, 10)
	b = append(b, `","holds":`...)
	b = strconv.AppendInt(b, int64(r.Holds), 10)
	return append(b, '}'), true
}

// appendTime appends t as api.Time's MarshalJSON encodes it.
func appendTime(b []byte, t api.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	u := t.UTC()
	year, month, day := u.Date()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = u.Truncate(time.Millisecond).AppendFormat(b, api.TimeFormat)
		return append(b, '"')
	}
	// api.TimeFormat's digits written directly (FuzzAppendTime): three
	// of these per lease answer, and AppendFormat walks its layout each
	// time
	hour, minute, sec := u.Clock()
	ms := u.Nanosecond() / int(time.Millisecond)
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, ms, 3)
	return append(b, 'Z', '"')
}

// appendDigits appends v (0 ≤ v < 10^width) in width decimal digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [4]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// appendString appends s as a JSON string the way encoding/json does
// (HTML-escaped): printable ASCII other than " \ < > & as it is; anything
// else through encoding/json itself (rare in a lease: object names and
// infos the caller chose).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string: cannot fail
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
