package sidecar_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
)

// TestEngineOptionsDigestFile: zookeeper.auth.digest.file reaches the
// engine as its digest (the file's line); a file gone bad since the load is
// an error naming the key, not the content.
func TestEngineOptionsDigestFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "digest")
	if err := os.WriteFile(f, []byte("baton:fr0m-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := props.Defaults()
	cfg.AuthDigestFile = f
	o, err := sidecar.EngineOptions(cfg, nil)
	if err != nil || o.AuthDigest != "baton:fr0m-file" {
		t.Fatalf("EngineOptions(digest.file) AuthDigest = %q, %v; want the file's line", o.AuthDigest, err)
	}
	if err := os.WriteFile(f, []byte("fr0m-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = sidecar.EngineOptions(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "zookeeper.auth.digest.file") || strings.Contains(err.Error(), "fr0m-file") {
		t.Errorf("EngineOptions(bad digest.file) error = %v, want one naming the key and not the content", err)
	}
}
