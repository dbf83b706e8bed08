package dlq_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton/dlq"
)

// TestLetterNotHTMLEscaped (issue 15 item 1): '<', '>' and '&' in the
// payload, info and error stay one byte each in the letter (json.Marshal
// would make each a 6-byte \u escape), and the letter decodes back.
func TestLetterNotHTMLEscaped(t *testing.T) {
	l := sampleLetter("op-h", "o<&>")
	l.Payload = json.RawMessage(`"` + strings.Repeat("<&>", 1000) + `"`)
	l.Info, l.LastError = "<b>info</b> & more", "app answered <html>"
	m, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(m.Value), `\u003c`) || strings.Contains(string(m.Value), `\u0026`) ||
		!strings.Contains(string(m.Value), `"info":"<b>info</b> & more"`) {
		t.Errorf("value is HTML-escaped:\n%.300s", m.Value)
	}
	if len(m.Value) > len(l.Payload)+1024 {
		t.Errorf("value = %d bytes for a %d-byte payload", len(m.Value), len(l.Payload))
	}
	got, err := dlq.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != string(l.Payload) || got.Info != l.Info || got.Object != l.Object {
		t.Errorf("decoded letter differs: payload %d bytes (want %d, as sent), info %q, object %q", len(got.Payload), len(l.Payload), got.Info, got.Object)
	}
}

// TestFit: a letter within the limit is kept; one over it loses its
// payload (size and SHA-256 kept, info and error cut to ElidedMax) and
// fits; one that cannot fit even so is ErrTooLarge.
func TestFit(t *testing.T) {
	l := sampleLetter("op-f", "o")
	l.Payload = json.RawMessage(`{"doc":"` + strings.Repeat("x", 200_000) + `"}`)
	l.Info = strings.Repeat("i", 5000)
	m, _ := l.Encode()
	size := dlq.MessageSize(m)
	if size < len(m.Value)+len(m.Key) {
		t.Fatalf("MessageSize = %d < key + value", size)
	}

	got, gm, err := dlq.Fit(l, size)
	if err != nil || got.Elided || string(gm.Value) != string(m.Value) {
		t.Errorf("Fit at its own size: elided %v, err %v; want the letter unchanged", got.Elided, err)
	}

	got, gm, err = dlq.Fit(l, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(l.Payload)
	if !got.Elided || string(got.Payload) != "null" || got.PayloadBytes != len(l.Payload) || got.PayloadSHA256 != hex.EncodeToString(sum[:]) ||
		len(got.Info) != dlq.ElidedMax || got.ID != l.ID || got.Attempts != l.Attempts {
		t.Errorf("Fit over the limit: elided %v, payload %.20s, bytes %d, sha %s, info %d bytes", got.Elided, got.Payload, got.PayloadBytes, got.PayloadSHA256, len(got.Info))
	}
	if n := dlq.MessageSize(gm); n > 100_000 {
		t.Errorf("elided letter is %d bytes, over the 100000 limit", n)
	}
	dec, err := dlq.Decode(gm)
	if err != nil || !dec.Elided || dec.PayloadSHA256 != got.PayloadSHA256 || dec.PayloadBytes != got.PayloadBytes {
		t.Errorf("decoded elided letter: elided %v, bytes %d, sha %s, %v", dec.Elided, dec.PayloadBytes, dec.PayloadSHA256, err)
	}

	if _, _, err := dlq.Fit(l, 500); !errors.Is(err, dlq.ErrTooLarge) {
		t.Errorf("Fit(500) = %v, want ErrTooLarge", err)
	}
}
