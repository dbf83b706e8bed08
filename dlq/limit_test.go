package dlq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/batonhq/baton/dlq"
)

// TestLimitLearnt: a broker whose message.max.bytes is 100,000 and that
// refuses to describe the topic's configuration (no DescribeConfigs
// permission): the publisher starts at its own 1 MiB limit, learns from the
// refusals, and within a few rounds every letter is published, the one
// over the real limit without its payload.
func TestLimitLearnt(t *testing.T) {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, topic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "100000"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.(*kmsg.DescribeConfigsRequest).Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, 29 // TOPIC_AUTHORIZATION_FAILED
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	p := newPublisher(t, c.ListenAddrs()[0], dlq.PublisherOptions{Timeout: 5 * time.Second})
	ctx := context.Background()
	if got := p.Limit(ctx); got != dlq.DefaultMaxMessageBytes {
		t.Fatalf("Limit with an undescribed topic = %d, want the default %d", got, dlq.DefaultMaxMessageBytes)
	}
	var pending []dlq.Letter
	for i, n := range []int{60_000, 60_000, 60_000, 150_000} {
		l := sampleLetter("op-"+string(rune('a'+i)), "obj-"+string(rune('a'+i)))
		l.Payload = json.RawMessage(`"` + strings.Repeat("x", n) + `"`)
		pending = append(pending, l)
	}
	published := map[string]dlq.Letter{}
	for round := 0; round < 8 && len(pending) > 0; round++ {
		limit := p.Limit(ctx)
		var batch []dlq.Letter
		size := 0
		for _, l := range pending {
			fl, m, err := dlq.Fit(l, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) > 0 && size+dlq.MessageSize(m) > limit {
				break
			}
			batch, size = append(batch, fl), size+dlq.MessageSize(m)
		}
		err := p.PublishBatch(ctx, batch)
		t.Logf("round %d: limit %d, %d letters, %d bytes: %v", round, limit, len(batch), size, err)
		be, _ := err.(*dlq.BatchError)
		for i, l := range batch {
			if err == nil || be != nil && be.Errs[i] == nil {
				published[l.ID] = l
			}
		}
		var rest []dlq.Letter
		for _, l := range pending {
			if _, ok := published[l.ID]; !ok {
				rest = append(rest, l)
			}
		}
		pending = rest
	}
	if len(pending) != 0 {
		t.Fatalf("%d letters still unpublished after 8 rounds", len(pending))
	}
	for id, l := range published {
		if l.Elided != (id == "op-d") {
			t.Errorf("%s published elided=%v, want elided only for the 150 kB one", id, l.Elided)
		}
	}
}
