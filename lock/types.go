package lock

import (
	"fmt"
	"strings"
)

// Type is the kind of work a lock request is for. Foreground requests are
// ordered before every background request on the same object.
type Type int

const (
	// Foreground is work a user or a synchronous call is waiting for.
	Foreground Type = iota
	// Background is deferred work (indexing, KPI updates, propagation).
	Background
)

// String returns "foreground" or "background".
func (t Type) String() string {
	switch t {
	case Foreground:
		return "foreground"
	case Background:
		return "background"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// ParseType parses "foreground" or "background" (case-insensitive).
func ParseType(s string) (Type, error) {
	switch strings.ToLower(s) {
	case "foreground":
		return Foreground, nil
	case "background":
		return Background, nil
	}
	return 0, fmt.Errorf("lock: type %q is not \"foreground\" or \"background\"", s)
}

// ObjectNode says how object nodes are created.
type ObjectNode int

const (
	// Container object nodes are reaped by ZooKeeper once empty.
	Container ObjectNode = iota
	// Persistent object nodes stay; use while the original plugin shares the tree.
	Persistent
)

// String returns "container" or "persistent".
func (o ObjectNode) String() string {
	if o == Persistent {
		return "persistent"
	}
	return "container"
}

// State is the state of a grant.
type State int

const (
	// Held: the session is connected and the grant is valid.
	Held State = iota
	// Suspect: the session is disconnected; the grant is valid until its deadline.
	Suspect
	// Lost: the grant ended without Release (session lost, privateLock deleted).
	Lost
	// Released: Release succeeded (or is completing in the background).
	Released
)

// String returns "held", "suspect", "lost" or "released".
func (s State) String() string {
	switch s {
	case Held:
		return "held"
	case Suspect:
		return "suspect"
	case Lost:
		return "lost"
	case Released:
		return "released"
	}
	return fmt.Sprintf("State(%d)", int(s))
}
