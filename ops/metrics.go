package ops

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/queue"
)

// metrics are the dispatcher's Prometheus metrics. The gauges are computed
// from the queue at scrape time.
type metrics struct {
	d            *Dispatcher
	ops          *prometheus.CounterVec
	dlqPublished prometheus.Counter
	dlqElided    prometheus.Counter
	storeRetries prometheus.Counter
	attempts     prometheus.Histogram
	queued       *prometheus.Desc
	dlqPending   *prometheus.Desc
	oldest       *prometheus.Desc
	fileBytes    *prometheus.Desc
}

func newMetrics() *metrics {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_ops_total",
			Help: "Background op state transitions, by the state entered (queued counts accepts, replays and ops given back uncounted).",
		}, []string{"state"}),
		dlqPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_dlq_published_total",
			Help: "Dead letters published to the dead-letter topic and recorded as dead_lettered.",
		}),
		dlqElided: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_dlq_payload_elided_total",
			Help: "Dead letters published without their payload (with its size and SHA-256) because they did not fit the topic's message limit.",
		}),
		storeRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_queue_write_retries_total",
			Help: "Retries of failed queue state writes (each is retried with backoff until it succeeds).",
		}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_op_attempts",
			Help:    "Attempts an op took when it finished delivering (done) or failed for good (dlq_pending).",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 11, 16, 21, 31},
		}),
		queued: prometheus.NewDesc("baton_ops_queued",
			"Ops waiting for delivery or being delivered (queued, running, retrying).", nil, nil),
		dlqPending: prometheus.NewDesc("baton_dlq_pending",
			"Ops that failed for good and wait to be published to the dead-letter topic.", nil, nil),
		oldest: prometheus.NewDesc("baton_op_oldest_age_seconds",
			"Age of the oldest unfinished op (including dlq_pending); 0 when there is none.", nil, nil),
		fileBytes: prometheus.NewDesc("baton_queue_file_bytes",
			"Size of the queue's bbolt file (queue.dir/queue.db) in bytes.", nil, nil),
	}
	for _, s := range queue.States {
		m.ops.WithLabelValues(string(s))
	}
	return m
}

func (m *metrics) transition(to queue.State) { m.ops.WithLabelValues(string(to)).Inc() }

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.ops, m.dlqPublished, m.dlqElided, m.storeRetries, m.attempts, gauges{m}} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// gauges collects the queue's gauges from one Stats call per scrape.
type gauges struct{ m *metrics }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.m.queued
	ch <- g.m.dlqPending
	ch <- g.m.oldest
	ch <- g.m.fileBytes
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	var queued, pending, age, size float64
	if d := g.m.d; d != nil && d.store != nil {
		st := d.store.Stats()
		queued = float64(st.ByState[queue.Queued] + st.ByState[queue.Running] + st.ByState[queue.Retrying])
		pending = float64(st.ByState[queue.DLQPending])
		size = float64(st.FileBytes)
		if !st.OldestUnfinished.IsZero() {
			age = max(time.Since(st.OldestUnfinished).Seconds(), 0)
		}
	}
	ch <- prometheus.MustNewConstMetric(g.m.queued, prometheus.GaugeValue, queued)
	ch <- prometheus.MustNewConstMetric(g.m.dlqPending, prometheus.GaugeValue, pending)
	ch <- prometheus.MustNewConstMetric(g.m.oldest, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(g.m.fileBytes, prometheus.GaugeValue, size)
}
