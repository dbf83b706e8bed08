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

// Protocol is the znode layout an engine uses under its lock root (SPEC §7:
// zookeeper.lock.protocol).
type Protocol int

const (
	// Plugin is the original plugin's layout ("A-"/"B-" children and
	// privateLock): Baton and the plugin exclude each other under one root.
	Plugin Protocol = iota
	// Native is Baton's own layout for roots with no plugin node left: the
	// holders are named in the object node's data, a release hands the lock
	// to the next holder in the same write, and shared (read) locks are
	// possible. A plugin node under a native root is an error, never a
	// grant. See "Native protocol" in the package doc.
	Native
)

// String returns "plugin" or "native".
func (p Protocol) String() string {
	if p == Native {
		return "native"
	}
	return "plugin"
}

// ParseProtocol parses "plugin" or "native" (case-insensitive).
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(s) {
	case "plugin":
		return Plugin, nil
	case "native":
		return Native, nil
	}
	return 0, fmt.Errorf("lock: protocol %q is not \"plugin\" or \"native\"", s)
}
