package api

// LockWatch is the answer of GET /v1/locks/{object}?wait=change, the
// long-poll for a change of the object's holder or queue: the state as GET
// /v1/locks/{object} gives it, its Version (pass it back as version= to
// wait for the state after it), and whether it differs from what the caller
// said it saw (false: timeout_ms passed without a change).
type LockWatch struct {
	Object  string   `json:"object"`
	Holder  *Holder  `json:"holder"`
	Holders []Holder `json:"holders"` // every holder (several: shared), as in LockStatus
	Waiters []Waiter `json:"waiters"`
	Version string   `json:"version"`
	Changed bool     `json:"changed"`
}

// MaxVersionLen bounds the version= of a watch: versions are short
// (a zxid in decimal, optionally ".gone").
const MaxVersionLen = 64
