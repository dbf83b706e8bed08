package props

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestZKTLSKeysNeedTLS: a zookeeper.tls.* file or name set while
// zookeeper.tls.enabled is off is refused, naming both keys, as the
// kafka.tls.* keys are; with TLS on the same values load.
func TestZKTLSKeysNeedTLS(t *testing.T) {
	dir := t.TempDir()
	pem := writeProps(t, dir, "x.pem", "not read at load")
	for _, key := range []string{"zookeeper.tls.ca.file", "zookeeper.tls.cert.file", "zookeeper.tls.key.file", "zookeeper.tls.server.name"} {
		v := pem
		if key == "zookeeper.tls.server.name" {
			v = "zk.example"
		}
		path := writeProps(t, dir, key+".properties", key+" = "+v)
		_, err := Load(LoadOptions{File: path})
		fes := fieldErrors(err)
		want := fmt.Sprintf(`%s:1: %s: %q is not empty while zookeeper.tls.enabled is false (set it to true)`, path, key, v)
		if len(fes) != 1 || fes[0].Error() != want {
			t.Errorf("Load(%s = %s) = %v, want one error %q", key, v, err, want)
		}
		if _, err := Load(LoadOptions{File: path, Set: []string{"zookeeper.tls.enabled=true"}}); err != nil {
			t.Errorf("Load(%s = %s, zookeeper.tls.enabled=true) = %v, want no error", key, v, err)
		}
	}
}

// TestZKDigestFile: zookeeper.auth.digest.file supplies the digest, one
// trailing newline ignored; with zookeeper.auth.digest too, or with a
// content that is not user:password, it is refused naming the key; the
// content is never printed (errors, Lines, String, JSON).
func TestZKDigestFile(t *testing.T) {
	const secret = "alice:d1gest-s3cret"
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, crlf := file("good", secret+"\n"), file("crlf", secret+"\r\n")
	for _, p := range []string{good, crlf} {
		l, err := Load(LoadOptions{NoFile: true, Set: []string{"zookeeper.auth.digest.file=" + p}})
		if err != nil {
			t.Fatalf("Load(digest.file=%s): %v", p, err)
		}
		if d, err := l.Config.ZKDigest(); d != secret || err != nil {
			t.Errorf("ZKDigest() from %s = %q, %v; want the file's line", p, d, err)
		}
		js, _ := json.Marshal(l.Config)
		for name, out := range map[string]string{"Lines": l.String(), "String": l.Config.String(), "JSON": string(js), "%#v": fmt.Sprintf("%#v", l.Config)} {
			if strings.Contains(out, "d1gest-s3cret") {
				t.Errorf("%s prints the digest read from the file: %s", name, out)
			}
		}
	}
	if d, err := Defaults().ZKDigest(); d != "" || err != nil {
		t.Errorf("Defaults().ZKDigest() = %q, %v; want none", d, err)
	}
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"both", []string{"zookeeper.auth.digest=" + secret, "zookeeper.auth.digest.file=" + good},
			`--set zookeeper.auth.digest.file: "` + good + `" is not allowed together with zookeeper.auth.digest (BATON_ZOOKEEPER_AUTH_DIGEST): set only one`},
		{"no colon", []string{"zookeeper.auth.digest.file=" + file("nocolon", "alice-d1gest-s3cret\n")},
			`does not hold one line user:password (non-empty user and password)`},
		{"empty password", []string{"zookeeper.auth.digest.file=" + file("nopass", "alice:\n")}, `does not hold one line user:password`},
		{"two lines", []string{"zookeeper.auth.digest.file=" + file("twolines", secret+"\n"+secret+"\n")}, `does not hold one line user:password`},
		{"empty", []string{"zookeeper.auth.digest.file=" + file("empty", "")}, `does not hold one line user:password`},
		{"missing", []string{"zookeeper.auth.digest.file=" + filepath.Join(dir, "missing")}, `is not a readable file`},
	} {
		_, err := Load(LoadOptions{NoFile: true, Set: tc.set})
		fes := fieldErrors(err)
		if len(fes) != 1 || fes[0].Key != "zookeeper.auth.digest.file" || !strings.Contains(fes[0].Error(), tc.want) {
			t.Errorf("%s: Load = %v, want one error on zookeeper.auth.digest.file containing %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "d1gest-s3cret") {
			t.Errorf("%s: the error prints the secret: %v", tc.name, err)
		}
	}
}

// TestCautions: an empty digest and SASL PLAIN without TLS are cautions
// naming the key, saying what it means and what to set; each goes away
// when fixed.
func TestCautions(t *testing.T) {
	dir := t.TempDir()
	pw := writeProps(t, dir, "pw", "pw")
	digest := writeProps(t, dir, "digest", "u:p")
	plain := []string{"kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u", "kafka.sasl.password.file=" + pw}
	for _, tc := range []struct {
		name string
		set  []string
		want []string // key: words of the message
	}{
		{"defaults", nil, []string{"zookeeper.auth.digest: world ACL … set zookeeper.auth.digest.file"}},
		{"digest", []string{"zookeeper.auth.digest=u:p"}, nil},
		{"digest file", []string{"zookeeper.auth.digest.file=" + digest}, nil},
		{"plain without tls", append([]string{"zookeeper.auth.digest=u:p"}, plain...),
			[]string{"kafka.sasl.mechanism: password crosses the network in clear text … set kafka.tls.enabled=true"}},
		{"plain with tls", append([]string{"zookeeper.auth.digest=u:p", "kafka.tls.enabled=true"}, plain...), nil},
		{"native with container", []string{"zookeeper.auth.digest=u:p", "zookeeper.lock.protocol=native"},
			[]string{"zookeeper.object.node: always creates persistent object nodes … never reaps … set zookeeper.object.node=persistent"}},
		{"native with persistent", []string{"zookeeper.auth.digest=u:p", "zookeeper.lock.protocol=native", "zookeeper.object.node=persistent"}, nil},
		{"plugin with container", []string{"zookeeper.auth.digest=u:p", "zookeeper.lock.protocol=plugin"}, nil},
		{"scram without tls", []string{"zookeeper.auth.digest=u:p", "kafka.sasl.mechanism=SCRAM-SHA-256", "kafka.sasl.username=u", "kafka.sasl.password.file=" + pw}, nil},
	} {
		l, err := Load(LoadOptions{NoFile: true, Set: tc.set})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := Cautions(l.Config)
		if len(got) != len(tc.want) {
			t.Errorf("%s: Cautions = %v, want %d", tc.name, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			key, words, _ := strings.Cut(w, ": ")
			if got[i].Key != key {
				t.Errorf("%s: caution %d key %q, want %q", tc.name, i, got[i].Key, key)
			}
			for part := range strings.SplitSeq(words, " … ") {
				if !strings.Contains(got[i].Msg, part) {
					t.Errorf("%s: caution %q, want it to say %q", tc.name, got[i].Msg, part)
				}
			}
		}
	}
}
