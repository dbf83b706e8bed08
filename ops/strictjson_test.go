package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// TestStrictSubmitJSON: the ops handler decodes bodies as the sidecar does:
// keys matched exactly and at most once, a 400 naming the key; the payload
// is the app's and is not looked into (its keys are delivered as sent).
func TestStrictSubmitJSON(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true})
	for _, tc := range []struct{ name, path, body, field, says string }{
		{"upper-case key", "/v1/ops", `{"OBJECT":"o"}`, "OBJECT", `did you mean "object"?`},
		{"case variant beside the key", "/v1/ops", `{"object":"o","Object":"p"}`, "Object", `did you mean "object"?`},
		{"duplicate object", "/v1/ops", `{"object":"a","object":"b"}`, "object", "given twice"},
		{"duplicate id", "/v1/ops", `{"id":"x1","object":"o","id":"x2"}`, "id", "given twice"},
		{"duplicate payload", "/v1/ops", `{"object":"o","payload":1,"payload":2}`, "payload", "given twice"},
		{"replay body key", "/v1/ops/x/replay", `{"Force":true}`, "Force", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae api.Error
			decodeStrict(t, e.mustCall(400, "POST", tc.path, tc.body), &ae)
			if ae.Kind != api.BadRequest || ae.Field != tc.field || !strings.Contains(ae.Message, tc.says) {
				t.Errorf("POST %s %s = %+v, want 400 naming %q saying %q", tc.path, tc.body, ae, tc.field, tc.says)
			}
		})
	}
	if got := e.metric("baton_ops_queued", nil); got != 0 {
		t.Errorf("baton_ops_queued = %v after refused submissions, want 0", got)
	}
	const payload = `{"a":1,"A":2,"a":3}`
	id := e.submit(`{"id":"strict-1","object":"o","payload":` + payload + `}`)
	e.waitState(id, api.OpDone, 20*time.Second)
	if ds := e.app.ByID(id); len(ds) != 1 || string(ds[0].Payload) != payload {
		t.Errorf("deliveries = %+v, want one with the payload %s as sent", ds, payload)
	}
}
