//lint:file-ignore U1000 printDevTour and its helpers are used by dev_serve.go (build tag dev: make run)

package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// devStep is one step of the tour `baton dev` prints: a comment, or a
// command to paste into a shell that ran the printed exports.
type devStep struct {
	Note string // a "# ..." line before the command; "" for none
	Cmd  string // the command, "" for a note alone
	// Want is text the command's output shows once the step did what the
	// note says (some steps take a moment: deliveries, retries, dead
	// letters); the dev tour test checks it. "" for no check.
	Want string
}

// devLeasePlaceholder stands for the lease id of the tour's first acquire.
const devLeasePlaceholder = "LEASE_ID"

// devExports returns the lines that point the CLI, in another shell, at
// the dev sidecar and broker, and put the binary that runs dev on PATH.
func devExports(exe, sock, brokers string) []string {
	return []string{
		fmt.Sprintf("export BATON_SIDECAR_SOCKET_PATH=%s BATON_KAFKA_BROKERS=%s", shellQuote(sock), shellQuote(brokers)),
		fmt.Sprintf("export PATH=%s:\"$PATH\"", shellQuote(filepath.Dir(exe))),
	}
}

// devTour returns the tour: every feature in the order a new user meets
// them. app is the demo app's base URL ("http://127.0.0.1:PORT").
func devTour(app string) []devStep {
	curl := "curl -s --unix-socket \"$BATON_SIDECAR_SOCKET_PATH\""
	return []devStep{
		{Note: "1. a lock over plain HTTP: the answer is a lease (token = the fencing token for your storage)"},
		{Cmd: curl + ` -XPOST -d '{"info":"tour","lease_ms":60000}' http://baton/v1/locks/article-1/acquire`, Want: `"state":"held"`},
		{Note: "   who holds it, who waits (cluster-wide)", Cmd: "baton locks article-1", Want: "tour"},
		{Note: "   release it with the lease_id of the answer", Cmd: curl + " -XDELETE http://baton/v1/leases/" + devLeasePlaceholder,
			Want: `"released":true`},
		{Note: "2. run a command holding the lock (renewed; the command is stopped if the lock is lost)",
			Cmd: `baton lock article-1 -- sh -c 'echo "holding $BATON_OBJECT with token $BATON_FENCING_TOKEN"'`, Want: "holding article-1 with token"},
		{Note: "3. a background op: the sidecar takes the background lock and POSTs it to the demo app (watch the app: lines)",
			Cmd: `baton ops submit --id tour-1 article-1 '{"title":"hello"}'`, Want: "tour-1"},
		{Cmd: "baton ops get tour-1", Want: "done"},
		{Note: "4. retries: the app answers 503 twice for article-2, then 200 (backoff: retry.* properties)",
			Cmd: "curl -s -XPOST '" + app + "/answer?object=article-2&status=503&times=2'", Want: "503"},
		{Cmd: `baton ops submit --id tour-2 article-2 '{"title":"flaky"}'`, Want: "tour-2"},
		{Cmd: "baton ops get tour-2", Want: "done"},
		{Note: "5. a dead letter: a 4xx other than 408/409/423/429 is permanent; the op goes to the Kafka topic",
			Cmd: "curl -s -XPOST '" + app + "/answer?object=article-3&status=400'", Want: "400"},
		{Cmd: `baton ops submit --id tour-3 article-3 '{"title":"bad"}'`, Want: "tour-3"},
		{Cmd: "baton ops get tour-3", Want: "dead_lettered"},
		{Cmd: "baton dlq ls", Want: "tour-3"},
		{Note: "6. replay: let the app accept article-3 again, then queue the dead letters again",
			Cmd: "curl -s -XPOST '" + app + "/answer?object=article-3&status=200'", Want: "removed"},
		{Cmd: "baton dlq replay", Want: "tour-3"},
		{Cmd: "baton ops get tour-3", Want: "done"},
		{Note: "7. what the app received; the API reference (OpenAPI 3.1)",
			Cmd: "curl -s " + app + "/deliveries", Want: `"id":"tour-3"`},
		{Cmd: curl + " http://baton/v1/openapi.json | head -c 300; echo", Want: `"openapi"`},
		{Note: "   health, and everything else: baton --help"},
		{Cmd: "baton status", Want: "serving"},
	}
}

// printDevTour writes the exports and the tour: narrative lines prefixed
// "dev: ", lines to paste indented (pasteIndent).
func printDevTour(w io.Writer, exe, sock, brokers, app string) {
	var b strings.Builder
	b.WriteString("dev: in another shell, paste:\n")
	for _, l := range devExports(exe, sock, brokers) {
		b.WriteString(pasteIndent + l + "\n")
	}
	b.WriteString("dev: then try:\n")
	for _, s := range devTour(app) {
		if s.Note != "" {
			b.WriteString(pasteIndent + "# " + s.Note + "\n")
		}
		if s.Cmd != "" {
			b.WriteString(pasteIndent + s.Cmd + "\n")
		}
	}
	b.WriteString("dev: demo app: " + app + "/answer?object=O&status=N[&times=K] (or op=ID) makes it answer N; status=200 removes the rule\n")
	b.WriteString("dev: Ctrl-C stops everything; the data is discarded\n")
	io.WriteString(w, b.String())
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:,@=+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pasteIndent starts every line meant to be pasted into a shell (exports,
// the tour's comments and commands): no "dev:" prefix, so that a whole line
// selected in a terminal pastes as it is.
const pasteIndent = "    "
