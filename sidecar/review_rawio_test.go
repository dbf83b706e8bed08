package sidecar_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// Review of the app connection read and written through internal/rawio
// (sidecar/caps.go's peerConn): net/http over one hand-driven unix
// connection, in the ways a caller can stress its reads and writes.

// TestReviewRawioSidecarOneConnection: on one keep-alive connection, a
// request sent a byte at a time (the server's reads come back short and
// wait), three requests of a ~128 KB answer each sent in one write and read
// only after the server has filled the socket (its writes wait for room
// again and again), then acquires and releases in a row. Every answer is
// whole, in order, and the connection stays open throughout.
func TestReviewRawioSidecarOneConnection(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	want := s.mustCall(200, "GET", "/v1/openapi.json", "")
	if len(want) < 100_000 {
		t.Fatalf("the OpenAPI document is %d bytes; the test wants more than a unix socket's buffer in three", len(want))
	}
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	read := func(what string) (*http.Response, []byte) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", what, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: reading the body: %v", what, err)
		}
		if resp.Close {
			t.Fatalf("%s: the server closes the connection (%d %s)", what, resp.StatusCode, b)
		}
		return resp, b
	}

	req := "GET /v1/openapi.json HTTP/1.1\r\nHost: baton\r\n\r\n"
	for i := range len(req) {
		if _, err := c.Write([]byte{req[i]}); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if resp, b := read("a request a byte at a time"); resp.StatusCode != 200 || !bytes.Equal(b, want) {
		t.Fatalf("a request a byte at a time: %d, %d bytes (want 200, the %d of the document)", resp.StatusCode, len(b), len(want))
	}

	if _, err := c.Write([]byte(strings.Repeat(req, 3))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the server writes until the socket is full, and waits
	for i := range 3 {
		if resp, b := read(fmt.Sprint("pipelined ", i)); resp.StatusCode != 200 || !bytes.Equal(b, want) {
			t.Fatalf("pipelined request %d: %d, %d bytes (want 200, the %d of the document)", i, resp.StatusCode, len(b), len(want))
		}
	}

	for i := range 20 {
		body := `{"lease_ms":60000}`
		fmt.Fprintf(c, "POST /v1/locks/rawio/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, b := read(fmt.Sprint("acquire ", i))
		var l api.Lease
		if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil || l.LeaseID == "" {
			t.Fatalf("acquire %d: %d %s", i, resp.StatusCode, b)
		}
		fmt.Fprintf(c, "DELETE /v1/leases/%s HTTP/1.1\r\nHost: baton\r\n\r\n", l.LeaseID)
		if resp, b := read(fmt.Sprint("release ", i)); resp.StatusCode/100 != 2 {
			t.Fatalf("release %d: %d %s", i, resp.StatusCode, b)
		}
	}
}
