package sidecar

import (
	"testing"
	"time"
)

// Expired tombstones go at the next lookup, not only when the next one is
// added (issue 8): a sidecar that lost many leases once does not keep them.
func TestTombstonesPrunedOnLookup(t *testing.T) {
	s := &leaseTable{tombs: map[string]tomb{}}
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	s.mu.Lock()
	for i := range 100 {
		s.addTombLocked(string(rune('a'+i%26))+string(rune('0'+i/26)), tomb{until: past})
	}
	s.addTombLocked("live", tomb{until: future})
	s.mu.Unlock()
	if _, err := s.lookup("nope"); err == nil {
		t.Fatal("lookup of an unknown id succeeded")
	}
	s.mu.Lock()
	n, q := len(s.tombs), len(s.tombQ)
	s.mu.Unlock()
	if n != 1 || q != 1 {
		t.Errorf("after a lookup: %d tombstones (%d queued), want the 1 live one", n, q)
	}
	if _, err := s.lookup("live"); err == nil {
		t.Error("the live tombstone's lease looked up as live")
	}
}
