package lock

import (
	"slices"
	"testing"
)

// ageOrder against hand-checked orders: an aged background node goes before
// foreground nodes created after it aged, not before earlier ones; nodes
// that do not age (the plugin's, or an engine without aging) go last; no
// child is read when nothing can move.
func TestAgeOrder(t *testing.T) {
	info := map[string]childInfo{
		"A-0000000001": {ctime: 1000},
		"B-0000000002": {ctime: 1100, ageMs: 500}, // ages at 1600
		"A-0000000003": {ctime: 1200},
		"B-0000000004": {ctime: 1300},             // plain
		"A-0000000005": {ctime: 1700},             // after B-2 aged
		"B-0000000006": {ctime: 1750, ageMs: 100}, // ages at 1850
		"A-0000000007": {ctime: 1800},
		"A-0000000008": {ctime: 1900},
	}
	reads := 0
	get := func(n string) (childInfo, bool, error) {
		reads++
		ci, ok := info[n]
		return ci, ok, nil
	}
	var names []string
	for n := range info {
		names = append(names, n)
	}
	slices.Sort(names)
	got, aged, err := ageOrder(names, "A", "B", get)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A-0000000001", "A-0000000003", "B-0000000002", "A-0000000005", "A-0000000007", "B-0000000006", "A-0000000008", "B-0000000004"}
	if !slices.Equal(got, want) {
		t.Fatalf("order\n got %v\nwant %v", got, want)
	}
	if !aged["B-0000000002"] || !aged["B-0000000006"] || aged["B-0000000004"] {
		t.Fatalf("aged %v", aged)
	}
	// A gone child is left out.
	delete(info, "A-0000000005")
	got, _, _ = ageOrder(names, "A", "B", get)
	if slices.Contains(got, "A-0000000005") || len(got) != len(names)-1 {
		t.Fatalf("gone child kept: %v", got)
	}
	// Nothing can move: no reads.
	reads = 0
	got, _, _ = ageOrder([]string{"A-0000000001", "A-0000000003", "B-0000000004"}, "A", "B", get)
	if reads != 0 || got[2] != "B-0000000004" {
		t.Fatalf("lone last background node: %d reads, order %v", reads, got)
	}
}
