package queue_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/queue"
)

// BenchmarkSubmit measures fsynced submits per second with 1, 8 and 64
// concurrent submitters sharing group commits. The store lives in
// b.TempDir(), which must be on a real disk (not tmpfs) for the figure to
// mean anything; set TMPDIR otherwise.
func BenchmarkSubmit(b *testing.B) {
	payload := json.RawMessage(`{"index":"articles","doc":{"title":"hello","version":42}}`)
	for _, submitters := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("submitters=%d", submitters), func(b *testing.B) {
			s, err := queue.Open(b.TempDir(), queue.Options{MaxOps: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := range submitters {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						_, _, err := s.Submit(b.Context(), queue.SubmitRequest{
							ID: fmt.Sprintf("g%d-op%d", g, i), Object: fmt.Sprintf("article-%d", i%1000), Payload: payload,
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "submits/s")
		})
	}
}
