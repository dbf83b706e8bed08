package deploy

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// exitDrained is the status `baton serve` exits with after a drain asked
// through the API (cmd/baton exitDrained; TestServeAPIDrainExitStatus
// there checks the binary's side).
const exitDrained = "3"

// TestUnitRestartsAfterAPIDrain: under the shipped unit, a sidecar that an
// app drained through the API (POST /v1/drain, which any admin-class
// caller may send) is started again, as systemd decides from Restart=,
// SuccessExitStatus= and RestartForceExitStatus= (systemd.service(5)); a
// crash (status 1) is restarted too. Issue 18 §1: with Restart=on-failure
// and exit 0, one drain left the node without its sidecar.
func TestUnitRestartsAfterAPIDrain(t *testing.T) {
	f, err := os.Open("baton.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	svc := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "[Service]" {
			svc[k] = append(svc[k], strings.Fields(v)...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	restart := "no"
	if r := svc["Restart"]; len(r) > 0 {
		restart = r[len(r)-1]
	}
	restarts := func(status string) bool {
		if slices.Contains(svc["RestartForceExitStatus"], status) {
			return true
		}
		clean := status == "0" || slices.Contains(svc["SuccessExitStatus"], status)
		switch restart {
		case "always":
			return true
		case "on-failure", "on-abnormal":
			return !clean && restart == "on-failure"
		}
		return false
	}
	if !restarts(exitDrained) {
		t.Errorf("baton.service (Restart=%s, SuccessExitStatus=%v, RestartForceExitStatus=%v) does not restart after exit status %s (a drain through the API)",
			restart, svc["SuccessExitStatus"], svc["RestartForceExitStatus"], exitDrained)
	}
	if !restarts("1") {
		t.Errorf("baton.service does not restart after a failure (exit status 1)")
	}
	if !slices.Contains(svc["SuccessExitStatus"], exitDrained) {
		t.Errorf("baton.service counts exit status %s (a requested drain) as a failure: add it to SuccessExitStatus", exitDrained)
	}
}
