package dlq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/dlq"
)

const topic = "MdmDeadLetterQueue"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startKafka starts an in-process single-broker Kafka (kfake) on a free
// loopback port with the dead-letter topic of the given partitions.
// (testenv will provide this for the whole project.)
func startKafka(t testing.TB, partitions int32) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.DefaultNumPartitions(int(partitions)), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newPublisher(t testing.TB, addr string, opts dlq.PublisherOptions) *dlq.Publisher {
	t.Helper()
	opts.Brokers = []string{addr}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	p, err := dlq.NewPublisher(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newReader(t testing.TB, addr string) *dlq.Reader {
	t.Helper()
	r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: []string{addr}, Logger: testLogger(t), IdleTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// publish publishes letters letter-0..n-1 with objects from objs in turn.
func publish(t testing.TB, p *dlq.Publisher, from, n int, objs ...string) []dlq.Letter {
	t.Helper()
	var ls []dlq.Letter
	for i := from; i < from+n; i++ {
		l := sampleLetter(fmt.Sprintf("letter-%d", i), objs[i%len(objs)])
		l.Seq = uint64(i + 1)
		if err := p.Publish(t.Context(), l); err != nil {
			t.Fatalf("Publish(%s) = %v", l.ID, err)
		}
		ls = append(ls, l)
	}
	return ls
}

func ids(ls []dlq.Letter) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.ID)
	}
	return strings.Join(s, " ")
}

func TestPublishReadBack(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	sent := publish(t, p, 0, 3, "article-1", "article-2")
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for i, l := range sent {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := l.Encode()
		if m.Offset != int64(i) || !bytes.Equal(m.Key, want.Key) || !bytes.Equal(m.Value, want.Value) || !reflect.DeepEqual(m.Headers, want.Headers) {
			t.Errorf("message %d = key %q value %s headers %v,\nwant key %q value %s headers %v",
				i, m.Key, m.Value, m.Headers, want.Key, want.Value, want.Headers)
		}
	}
}

// kcat (librdkafka) is an independent client: it must see the same key,
// headers and value.
func TestKcatReadsLetters(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed")
	}
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	sent := publish(t, p, 0, 2, "article-1")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", topic, "-e", "-q", "-f", `%k|%h|%s\n`).Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	var want strings.Builder
	for _, l := range sent {
		m, _ := l.Encode()
		var hs []string
		for _, h := range m.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		fmt.Fprintf(&want, "%s|%s|%s\n", m.Key, strings.Join(hs, ","), m.Value)
	}
	if string(out) != want.String() {
		t.Errorf("kcat printed\n%s\nwant\n%s", out, want.String())
	}
}

// One object's letters keep their order across a 3-partition topic, and
// List reads every partition up to its end at start.
func TestListAcrossPartitions(t *testing.T) {
	_, addr := startKafka(t, 3)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	sent := publish(t, p, 0, 12, "a", "b", "c", "d")
	r := newReader(t, addr)
	var got []dlq.Letter
	lastOff := map[int]int64{}
	n, err := r.List(t.Context(), 0, func(m dlq.Message) error {
		if m.Err != nil {
			return m.Err
		}
		if prev, ok := lastOff[m.Partition]; ok && m.Offset <= prev {
			t.Errorf("partition %d: offset %d after %d", m.Partition, m.Offset, prev)
		}
		lastOff[m.Partition] = m.Offset
		got = append(got, m.Letter)
		return nil
	})
	if err != nil || n != len(sent) {
		t.Fatalf("List = %d, %v; want %d letters", n, err, len(sent))
	}
	// Per object, letters come in publish (seq) order.
	last := map[string]uint64{}
	for _, l := range got {
		if l.Seq <= last[l.Object] {
			t.Errorf("object %s: seq %d after %d", l.Object, l.Seq, last[l.Object])
		}
		last[l.Object] = l.Seq
	}
	if len(lastOff) < 2 {
		t.Logf("all objects hashed to %d partition(s)", len(lastOff))
	}
	// A replay over three partitions stops at the end as at start.
	c, err := r.Replay(t.Context(), dlq.ReplayOptions{Group: "g3"}, func(dlq.Letter) error { return nil })
	if err != nil || c.Replayed != len(sent) || c.Committed != len(sent) {
		t.Fatalf("Replay = %+v, %v; want all %d", c, err, len(sent))
	}
}

// ls reads up to the end the topic had when it started, commits nothing,
// and a replay afterwards still sees everything.
func TestListDoesNotConsume(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	sent := publish(t, p, 0, 5, "o1", "o2")
	r := newReader(t, addr)
	var listed []dlq.Letter
	published := false
	n, err := r.List(t.Context(), 0, func(m dlq.Message) error {
		if m.Err != nil {
			return m.Err
		}
		if !published { // a letter arriving during ls is not listed
			published = true
			publish(t, p, 5, 1, "o1")
		}
		listed = append(listed, m.Letter)
		return nil
	})
	if err != nil || n != 5 || ids(listed) != ids(sent) {
		t.Fatalf("List = %d, %v: %s; want %s", n, err, ids(listed), ids(sent))
	}
	var two []string
	if n, err := r.List(t.Context(), 2, func(m dlq.Message) error { two = append(two, m.Letter.ID); return nil }); err != nil || n != 2 ||
		strings.Join(two, " ") != "letter-0 letter-1" {
		t.Errorf("List(max 2) = %d, %v, %v", n, err, two)
	}
	var replayed []dlq.Letter
	c, err := r.Replay(t.Context(), dlq.ReplayOptions{Group: "after-ls"}, func(l dlq.Letter) error {
		replayed = append(replayed, l)
		return nil
	})
	if err != nil || c.Replayed != 6 {
		t.Fatalf("Replay after ls = %+v, %v; want all 6", c, err)
	}
}

// Replay stops at the first refusal without committing it; a second replay
// in the same group resumes exactly there.
func TestReplayStopsAndResumes(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	publish(t, p, 0, 5, "o1", "o2")
	r := newReader(t, addr)
	refusal := errors.New("sidecar answered 503 QueueFull")
	var first []dlq.Letter
	c, err := r.Replay(t.Context(), dlq.ReplayOptions{Group: "ops"}, func(l dlq.Letter) error {
		if l.ID == "letter-2" {
			return refusal
		}
		first = append(first, l)
		return nil
	})
	if !errors.Is(err, refusal) || !strings.Contains(err.Error(), "letter-2") {
		t.Fatalf("Replay = %v, want the refusal of letter-2", err)
	}
	if want := (dlq.Counts{Read: 3, Replayed: 2, Committed: 2, Failed: 1}); c != want || ids(first) != "letter-0 letter-1" {
		t.Fatalf("Replay counts = %+v (%s), want %+v", c, ids(first), want)
	}
	var second []dlq.Letter
	c, err = r.Replay(t.Context(), dlq.ReplayOptions{Group: "ops"}, func(l dlq.Letter) error {
		second = append(second, l)
		return nil
	})
	if err != nil || ids(second) != "letter-2 letter-3 letter-4" || c.Committed != 3 {
		t.Fatalf("second Replay = %+v, %v: %s; want letter-2..4", c, err, ids(second))
	}
	c, err = r.Replay(t.Context(), dlq.ReplayOptions{Group: "ops"}, func(l dlq.Letter) error {
		t.Errorf("third Replay passed %s, want nothing left", l.ID)
		return nil
	})
	if err != nil || c != (dlq.Counts{}) {
		t.Errorf("third Replay = %+v, %v; want nothing", c, err)
	}
	// Another group starts from the beginning.
	c, err = r.Replay(t.Context(), dlq.ReplayOptions{Group: "other"}, func(dlq.Letter) error { return nil })
	if err != nil || c.Replayed != 5 {
		t.Errorf("Replay in a new group = %+v, %v; want 5", c, err)
	}
}

// With Object or DryRun nothing is committed.
func TestReplayFilterAndDryRunCommitNothing(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	publish(t, p, 0, 6, "A", "B", "C")
	r := newReader(t, addr)
	var only []dlq.Letter
	c, err := r.Replay(t.Context(), dlq.ReplayOptions{Group: "g", Object: "B"}, func(l dlq.Letter) error {
		only = append(only, l)
		return nil
	})
	if err != nil || ids(only) != "letter-1 letter-4" || c != (dlq.Counts{Read: 6, Replayed: 2, Skipped: 4}) {
		t.Fatalf("Replay(Object B) = %+v, %v: %s", c, err, ids(only))
	}
	var dry []dlq.Letter
	c, err = r.Replay(t.Context(), dlq.ReplayOptions{Group: "g", DryRun: true}, func(l dlq.Letter) error {
		dry = append(dry, l)
		return nil
	})
	if err != nil || len(dry) != 6 || c.Committed != 0 {
		t.Fatalf("Replay(DryRun) = %+v, %v", c, err)
	}
	c, err = r.Replay(t.Context(), dlq.ReplayOptions{Group: "g"}, func(dlq.Letter) error { return nil })
	if err != nil || c.Replayed != 6 || c.Committed != 6 {
		t.Fatalf("real Replay after filter and dry run = %+v, %v; want all 6 (nothing was committed)", c, err)
	}
}

// Follow keeps going with letters published after the start, until ctx ends.
func TestReplayFollow(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	publish(t, p, 0, 2, "o")
	r := newReader(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var got []dlq.Letter
	c, err := r.Replay(ctx, dlq.ReplayOptions{Group: "f", Follow: true}, func(l dlq.Letter) error {
		got = append(got, l)
		if len(got) == 2 {
			// Published from the callback: Follow must go on past the
			// end the topic had at start.
			for i := 2; i < 4; i++ {
				if err := p.Publish(ctx, sampleLetter(fmt.Sprint("letter-", i), "o")); err != nil {
					return err
				}
			}
		}
		if len(got) == 4 {
			cancel()
		}
		return nil
	})
	if err != nil || ids(got) != "letter-0 letter-1 letter-2 letter-3" || c.Committed != 4 {
		t.Fatalf("Replay(Follow) = %+v, %v: %s", c, err, ids(got))
	}
	if errors.Is(t.Context().Err(), context.DeadlineExceeded) {
		t.Fatal("follow did not see the new letters")
	}
}

// A message that is not a dead letter stops a replay uncommitted.
func TestReplayStopsAtInvalidLetter(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	publish(t, p, 0, 1, "o")
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, BatchTimeout: time.Millisecond, Transport: tr,
		RequiredAcks: kafka.RequireAll} // written before Replay reads the end (the default, acks=0, returns before)
	if err := w.WriteMessages(t.Context(), kafka.Message{Key: []byte("o"), Value: []byte("not a letter")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	tr.CloseIdleConnections()
	r := newReader(t, addr)
	c, err := r.Replay(t.Context(), dlq.ReplayOptions{Group: "g"}, func(dlq.Letter) error { return nil })
	if !errors.Is(err, dlq.ErrInvalidLetter) || c.Committed != 1 || c.Failed != 1 {
		t.Fatalf("Replay = %+v, %v; want a stop at offset 1 after committing offset 0", c, err)
	}
	// ls shows it instead of stopping.
	var bad int
	if _, err := r.List(t.Context(), 0, func(m dlq.Message) error {
		if m.Err != nil {
			bad++
		}
		return nil
	}); err != nil || bad != 1 {
		t.Errorf("List = %v with %d invalid messages, want 1", err, bad)
	}
}

// Kafka down: Publish returns an error within its bound, never hangs.
func TestPublishBrokerUnreachable(t *testing.T) {
	t.Run("stopped cluster", func(t *testing.T) {
		c, addr := startKafka(t, 1)
		p := newPublisher(t, addr, dlq.PublisherOptions{Timeout: 3 * time.Second})
		publish(t, p, 0, 1, "o") // metadata and connections are cached
		c.Close()
		start := time.Now()
		err := p.Publish(t.Context(), sampleLetter("after-stop", "o"))
		if err == nil {
			t.Fatal("Publish to a stopped cluster succeeded")
		}
		if el := time.Since(start); el > 15*time.Second {
			t.Errorf("Publish took %v, want bounded by its 3s timeout", el)
		}
		t.Logf("after the broker stopped: %v (%v)", err, time.Since(start).Round(time.Millisecond))
	})
	t.Run("closed port", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		p := newPublisher(t, addr, dlq.PublisherOptions{Timeout: 3 * time.Second})
		start := time.Now()
		err = p.Publish(t.Context(), sampleLetter("nobody", "o"))
		if err == nil {
			t.Fatal("Publish to a closed port succeeded")
		}
		if el := time.Since(start); el > 15*time.Second {
			t.Errorf("Publish took %v, want bounded", el)
		}
		t.Logf("no broker: %v (%v)", err, time.Since(start).Round(time.Millisecond))
	})
	t.Run("caller deadline", func(t *testing.T) {
		// A broker that accepts connections but never answers.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var conns sync.WaitGroup
		done := make(chan struct{})
		conns.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				conns.Go(func() { <-done; c.Close() })
			}
		})
		defer func() { l.Close(); close(done); conns.Wait() }()
		p := newPublisher(t, l.Addr().String(), dlq.PublisherOptions{Timeout: 2 * time.Second, MaxAttempts: 1})
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if err := p.Publish(ctx, sampleLetter("blackhole", "o")); err == nil {
			t.Fatal("Publish to a silent broker succeeded")
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Errorf("Publish took %v, want bounded by the caller's 500ms", el)
		}
		p.Close()
	})
}

func TestPublishBatch(t *testing.T) {
	_, addr := startKafka(t, 1)
	p := newPublisher(t, addr, dlq.PublisherOptions{})
	var ls []dlq.Letter
	for i := range 50 {
		ls = append(ls, sampleLetter(fmt.Sprint("b", i), fmt.Sprint("obj", i%7)))
	}
	if err := p.PublishBatch(t.Context(), ls); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, addr)
	var got []dlq.Letter
	if _, err := r.List(t.Context(), 0, func(m dlq.Message) error { got = append(got, m.Letter); return m.Err }); err != nil {
		t.Fatal(err)
	}
	if ids(got) != ids(ls) {
		t.Errorf("batch read back %s, want %s", ids(got), ids(ls))
	}
}

// BenchmarkPublish measures published letters per second to an in-process
// broker: one synchronous publisher, and 64 concurrent ones sharing the
// writer's batches. BenchmarkPublishBatch publishes a backlog 100 at a time.
func BenchmarkPublish(b *testing.B) {
	for _, publishers := range []int{1, 64} {
		b.Run(fmt.Sprintf("publishers=%d", publishers), func(b *testing.B) {
			_, addr := startKafka(b, 1)
			p := newPublisher(b, addr, dlq.PublisherOptions{})
			l := sampleLetter("warmup", "o")
			if err := p.Publish(b.Context(), l); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := range publishers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						l := sampleLetter(fmt.Sprintf("op-%d-%d", g, i), fmt.Sprint("obj", i%100))
						if err := p.Publish(b.Context(), l); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "letters/s")
		})
	}
}

func BenchmarkPublishBatch(b *testing.B) {
	_, addr := startKafka(b, 1)
	p := newPublisher(b, addr, dlq.PublisherOptions{})
	batch := make([]dlq.Letter, 100)
	for i := range batch {
		batch[i] = sampleLetter(fmt.Sprint("op-", i), fmt.Sprint("obj", i%10))
	}
	start := time.Now()
	n := 0
	for b.Loop() {
		if err := p.PublishBatch(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "letters/s")
}
