package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton/testenv"
)

// TestDemoAppRules: the demo app answers 200 by default, an op rule before
// an object rule, a times=K rule K times, status=200 removes a rule, and
// bad control requests are refused naming the parameter.
func TestDemoAppRules(t *testing.T) {
	var out testenv.Buffer
	a, err := startDemoApp(&out)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	post := func(url, body string, hdr map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deliver := func(id, obj string) int {
		return post(a.URL(), `{"id":"`+id+`","object":"`+obj+`","info":"","payload":null,"attempt":1,"token":"7","seq":1,"accepted_at":"2026-01-01T00:00:00.000Z"}`,
			map[string]string{"Baton-Op-Id": id, "Baton-Object": obj, "Baton-Fencing-Token": "7", "Baton-Attempt": "1", "Baton-Op-Seq": "1"})
	}
	rule := func(q string) int { return post(a.Base()+"/answer?"+q, "", nil) }

	if got := deliver("o1", "a"); got != 200 {
		t.Fatalf("no rule: %d, want 200", got)
	}
	for _, c := range []struct {
		q    string
		want int
	}{
		{"object=a&status=503&times=2", 200},
		{"op=o9&status=400", 200},
		{"object=b&status=409", 200},
		{"status=503", 400},                  // neither object nor op
		{"object=a&op=o1&status=503", 400},   // both
		{"object=a&status=99", 400},          // not a status
		{"object=a&status=503&times=0", 400}, // times < 1
		{"object=a&status=503&color=red", 400},
	} {
		if got := rule(c.q); got != c.want {
			t.Errorf("POST /answer?%s: %d, want %d", c.q, got, c.want)
		}
	}
	for i, c := range []struct {
		id, obj string
		want    int
	}{
		{"o2", "a", 503}, {"o9", "a", 400}, {"o3", "a", 503}, {"o4", "a", 200}, // times=2 used up; o9's op rule wins
		{"o5", "b", 409}, {"o6", "b", 409},
	} {
		if got := deliver(c.id, c.obj); got != c.want {
			t.Errorf("delivery %d (%s of %s): %d, want %d", i, c.id, c.obj, got, c.want)
		}
	}
	if got := rule("object=b&status=200"); got != 200 {
		t.Fatalf("removing a rule: %d", got)
	}
	if got := deliver("o7", "b"); got != 200 {
		t.Errorf("after status=200 removed the rule: %d, want 200", got)
	}
	if n := len(a.Deliveries()); n != 8 {
		t.Errorf("%d deliveries recorded, want 8", n)
	}
	if !strings.Contains(out.String(), "app: delivery op=o2 object=a token=7 attempt=1 seq=1 payload=null -> 503 (rule object:a, 1 more)") {
		t.Errorf("log:\n%s", out.String())
	}
	// Headers that disagree with the body are reported.
	post(a.URL(), `{"id":"o8","object":"c","attempt":1,"token":"7","seq":1}`, map[string]string{"Baton-Op-Id": "other"})
	if !strings.Contains(out.String(), "HEADERS DIFFER") {
		t.Errorf("no HEADERS DIFFER for mismatched headers:\n%s", out.String())
	}
}

// TestDemoAppToken: with sidecar.app.token.file set, the demo app answers
// 401 to a delivery without the Baton-Token it holds, 200 with it; what it
// lists (GET /deliveries) never holds a delivery's Baton-Lease-Id.
func TestDemoAppToken(t *testing.T) {
	var out testenv.Buffer
	a, err := startDemoApp(&out)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.setToken("app-s3cret")
	deliver := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", a.URL(), strings.NewReader(`{"id":"t1","object":"a","info":"","payload":null,"attempt":1,"token":"7","seq":1,"accepted_at":"2026-01-01T00:00:00.000Z"}`))
		req.Header.Set("Baton-Lease-Id", "01a2174416ba50cf.14bfea673e0371f0acc612143de98818")
		if token != "" {
			req.Header.Set("Baton-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for token, want := range map[string]int{"": 401, "wrong": 401, "app-s3cret": 200} {
		if got := deliver(token); got != want {
			t.Errorf("Baton-Token %q: %d, want %d", token, got, want)
		}
	}
	resp, err := http.Get(a.Base() + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	if strings.Contains(b.String(), "14bfea67") || !strings.Contains(b.String(), `"t1"`) {
		t.Errorf("GET /deliveries = %s, want the delivery without its lease id", b.String())
	}
}
