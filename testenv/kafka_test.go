package testenv

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// newWriter returns a kafka-go Writer for DefaultTopic with its own
// transport; both are closed at cleanup.
func newWriter(t *testing.T, addr string, writeTimeout time.Duration) *kafka.Writer {
	t.Helper()
	tr := &kafka.Transport{DialTimeout: 2 * time.Second}
	w := &kafka.Writer{
		Addr:         kafka.TCP(addr),
		Topic:        DefaultTopic,
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		WriteTimeout: writeTimeout,
		ReadTimeout:  writeTimeout,
		MaxAttempts:  1,
		Transport:    tr,
	}
	t.Cleanup(func() {
		w.Close()
		tr.CloseIdleConnections()
	})
	return w
}

func TestKafkaRoundTrip(t *testing.T) {
	t.Parallel()
	k := KafkaT(t, KafkaOptions{})
	if k.Proxy() != nil || k.Addr() != k.BrokerAddr() {
		t.Errorf("without Proxy: Proxy() = %v, Addr() = %q, BrokerAddr() = %q", k.Proxy(), k.Addr(), k.BrokerAddr())
	}
	w := newWriter(t, k.Addr(), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := kafka.Message{
		Key:     []byte("key-0"),
		Value:   []byte(`{"op":"release"}`),
		Headers: []kafka.Header{{Key: "x-baton-error", Value: []byte("boom")}, {Key: "x-baton-attempts", Value: []byte("7")}},
	}
	if err := w.WriteMessages(ctx, want); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.Addr()}, Topic: DefaultTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	got, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("ReadMessage: %v", err)
	}
	if string(got.Key) != string(want.Key) || string(got.Value) != string(want.Value) {
		t.Errorf("read key %q value %q, want %q %q", got.Key, got.Value, want.Key, want.Value)
	}
	if !slices.EqualFunc(got.Headers, want.Headers, func(a, b kafka.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Errorf("read headers %v, want %v", got.Headers, want.Headers)
	}
}

func TestKafkaTopics(t *testing.T) {
	t.Parallel()
	k := KafkaT(t, KafkaOptions{Topics: []string{"a", "b"}, Partitions: 3})
	c, err := kafka.Dial("tcp", k.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.ReadPartitions()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, p := range parts {
		count[p.Topic]++
	}
	if count["a"] != 3 || count["b"] != 3 || count[DefaultTopic] != 0 {
		t.Errorf("partitions per topic = %v, want a:3 b:3", count)
	}
}

func TestKafkaAutoCreate(t *testing.T) {
	t.Parallel()
	for _, auto := range []bool{false, true} {
		t.Run("auto="+strconv.FormatBool(auto), func(t *testing.T) {
			k := KafkaT(t, KafkaOptions{AutoCreate: auto})
			w := newWriter(t, k.Addr(), 10*time.Second)
			w.Topic, w.AllowAutoTopicCreation = "fresh", true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			for range 20 { // a created topic may need a metadata refresh before its first write lands
				if err = w.WriteMessages(ctx, kafka.Message{Value: []byte("v")}); err == nil || !auto {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if auto && err != nil {
				t.Errorf("write to a new topic with AutoCreate: %v", err)
			}
			if !auto && err == nil {
				t.Errorf("write to a new topic without AutoCreate succeeded")
			}
		})
	}
}

// TestKafkaProxyBlackHole: a client given only the proxy's address goes
// through the proxy for every connection, so a black-holed proxy fails its
// write, and after Heal a write succeeds.
func TestKafkaProxyBlackHole(t *testing.T) {
	t.Parallel()
	k := KafkaT(t, KafkaOptions{Proxy: true})
	p := k.Proxy()
	if p == nil || k.Addr() != p.Addr() || k.Addr() == k.BrokerAddr() {
		t.Fatalf("with Proxy: Proxy() = %v, Addr() = %q, BrokerAddr() = %q", p, k.Addr(), k.BrokerAddr())
	}

	// The broker advertises the proxy, even to a client that dialed it directly.
	c, err := kafka.Dial("tcp", k.BrokerAddr())
	if err != nil {
		t.Fatal(err)
	}
	brokers, err := c.Brokers()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range brokers {
		if got := net.JoinHostPort(b.Host, strconv.Itoa(b.Port)); got != p.Addr() {
			t.Errorf("advertised broker %s, want the proxy %s", got, p.Addr())
		}
	}

	w := newWriter(t, k.Addr(), time.Second)
	write := func(v string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return w.WriteMessages(ctx, kafka.Message{Key: []byte(v), Value: []byte(v)})
	}
	if err := write("before"); err != nil {
		t.Fatalf("write before the fault: %v", err)
	}

	p.BlackHole()
	if err := write("during"); err == nil {
		t.Fatalf("write through a black-holed proxy succeeded, want an error")
	} else {
		t.Logf("write during black hole: %v", err)
	}

	p.Heal()
	var healErr error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if healErr = write("after"); healErr == nil {
			break
		}
	}
	if healErr != nil {
		t.Fatalf("write after Heal: %v", healErr)
	}

	// The broker has "before" and "after" (and maybe "during", if the
	// request got through before the reply was lost: at-least-once).
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.BrokerAddr()}, Topic: DefaultTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for !slices.Contains(keys, "after") {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read back (have %v): %v", keys, err)
		}
		keys = append(keys, string(m.Key))
	}
	if keys[0] != "before" {
		t.Errorf("keys read back = %v, want before first", keys)
	}
}
