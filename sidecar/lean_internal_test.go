package sidecar

import (
	"net/url"
	"reflect"
	"testing"
)

// FuzzPlainTarget: a target plainTarget takes is one url.ParseRequestURI
// parses to exactly &url.URL{Path: target}, the URL parseLean then uses.
func FuzzPlainTarget(f *testing.F) {
	for _, s := range []string{"/v1/locks/article-17/acquire", "/v1/leases/l-0a1b.c2", "/", "//x", "/a~b_c.d",
		"/v1/locks/a%2Fb/acquire", "/v1/locks/x?wait=false", "/a#b", "*", "", "/a b", "/a/../b", "/.", "/a:b", "/a;b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if !plainTarget(target) {
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("plainTarget(%q) but ParseRequestURI: %v", target, err)
		}
		if want := (&url.URL{Path: target}); !reflect.DeepEqual(u, want) {
			t.Fatalf("plainTarget(%q): ParseRequestURI %#v, not %#v", target, u, want)
		}
	})
}

// TestPlainTargetTakes: the usual targets take the short way.
func TestPlainTargetTakes(t *testing.T) {
	for target, want := range map[string]bool{
		"/v1/locks/article-17/acquire": true, "/v1/leases/l-7f3a9c2e.1": true,
		"/v1/locks/a%2Fb/acquire": false, "/v1/leases/x?wait=false": false, "v1/x": false,
	} {
		if got := plainTarget(target); got != want {
			t.Errorf("plainTarget(%q) = %v, want %v", target, got, want)
		}
	}
}
