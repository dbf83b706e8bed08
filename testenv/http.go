package testenv

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
)

// UnixHTTP returns a plain net/http client whose every request goes to the
// unix socket sock, whatever the URL's host: for tests that send the socket
// API raw requests. Its CloseIdleConnections closes the pooled connections.
func UnixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// Call sends one request through hc (see [UnixHTTP]) to path, with body
// unless it is empty, and returns the status and the whole response body. A
// request that gets no response returns status 0 and the error's text as the
// body. The request ends when ctx does.
func Call(ctx context.Context, hc *http.Client, method, path, body string) (int, []byte) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://sidecar"+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
