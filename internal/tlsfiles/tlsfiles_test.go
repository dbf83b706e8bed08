package tlsfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := Files{CAKey: "x.ca.file", CertKey: "x.cert.file", KeyKey: "x.key.file"}
	for _, tc := range []struct {
		name string
		f    Files
		want string
	}{
		{"missing CA", Files{CA: filepath.Join(dir, "nope.pem")}, "x.ca.file: open "},
		{"CA without a certificate", Files{CA: notPEM}, "x.ca.file: " + notPEM + " holds no PEM certificate"},
		{"cert without key", Files{Cert: notPEM}, "x.cert.file is set but x.key.file is not"},
		{"key without cert", Files{Key: notPEM}, "x.key.file is set but x.cert.file is not"},
		{"bad pair", Files{Cert: notPEM, Key: notPEM}, "x.cert.file / x.key.file: "},
	} {
		f := tc.f
		f.CAKey, f.CertKey, f.KeyKey = keys.CAKey, keys.CertKey, keys.KeyKey
		_, err := f.Config()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want prefix %q", tc.name, err, tc.want)
		}
	}
	if c, err := (Files{}).Config(); err != nil || c.RootCAs != nil {
		t.Errorf("no files: %v, %v; want system roots", c, err)
	}
}
