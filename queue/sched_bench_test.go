package queue

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSchedRemoveHead: the head of a 200,000-op object finishing
// (issue 15 item 6: was a slice shift per done op, 25 µs at 200k).
func BenchmarkSchedRemoveHead(b *testing.B) {
	const n = 200_000
	var sc scheduler
	sc.init()
	fill := func() []*entry {
		es := make([]*entry, n)
		for i := range es {
			es[i] = &entry{id: fmt.Sprint(i), object: "hot", seq: uint64(i + 1), state: Queued, acceptedAt: time.Unix(int64(i), 0)}
			sc.load(Op{ID: es[i].id, Object: "hot", Seq: es[i].seq, State: Queued, AcceptedAt: es[i].acceptedAt}, uint64(n))
		}
		return es
	}
	fill()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q := sc.objects["hot"]
		if q == nil {
			b.StopTimer()
			fill()
			b.StartTimer()
			q = sc.objects["hot"]
		}
		sc.remove(q.fifo[0])
	}
}

// BenchmarkListDLQPending: one dead-letter round's listing with 100,000
// dlq_pending ops (issue 15 item 6: was a scan and sort of every unfinished
// op, 39.6 ms per round at 100k).
func BenchmarkListDLQPending(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.mu.Lock()
	for i := range 100_000 {
		e := &entry{id: fmt.Sprintf("id-%d", i), object: fmt.Sprintf("obj-%d", i%1000), seq: uint64(i/1000 + 1), state: DLQPending}
		s.sched.entries[e.id] = e
		s.sched.addDLQ(e)
	}
	s.mu.Unlock()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.ListDLQPending(b.Context(), 64); err != nil {
			b.Fatal(err)
		}
	}
}
