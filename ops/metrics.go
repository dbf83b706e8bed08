package ops

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/queue"
	"github.com/batonhq/baton/retry"
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
	delivery     *prometheus.HistogramVec
	byState      *prometheus.Desc
	gauges       []gauge
}

// gauge is one of the queue's gauges without labels: its value is computed
// from the queue's Stats at scrape time.
type gauge struct {
	desc  *prometheus.Desc
	value func(st queue.Stats) float64
}

func newGauge(name, help string, value func(st queue.Stats) float64) gauge {
	return gauge{prometheus.NewDesc(name, help, nil, nil), value}
}

func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// ageOf is the age of t in seconds at scrape time, 0 for a zero t.
func ageOf(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(time.Since(t).Seconds(), 0)
}

// newMetrics makes the dispatcher's metrics (registered by New).
func newMetrics() *metrics {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_ops_total",
			Help: "Background op state transitions, by the state entered (queued counts accepts, replays and ops given back uncounted).",
		}, []string{"state"}),
		dlqPublished: newCounter("baton_dlq_published_total",
			"Dead letters published to the dead-letter topic and recorded as dead_lettered."),
		dlqElided: newCounter("baton_dlq_payload_elided_total",
			"Dead letters published without their payload (with its size and SHA-256) because they did not fit the topic's message limit."),
		storeRetries: newCounter("baton_queue_write_retries_total",
			"Retries of failed queue state writes (each is retried with backoff until it succeeds)."),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_op_attempts",
			Help:    "Attempts an op took when it finished delivering (done) or failed for good (dlq_pending).",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 11, 16, 21, 31},
		}),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_op_delivery_seconds",
			Help:    "Time of one delivery attempt, from holding the lock to the app's answer (or its failure), by result: ok, retry, permanent.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"result"}),
		byState: prometheus.NewDesc("baton_ops",
			"Ops in the queue by state (done and dead_lettered: those still retained).", []string{"state"}, nil),
		gauges: []gauge{
			newGauge("baton_ops_queued", "Ops waiting for delivery or being delivered (queued, running, retrying).",
				func(st queue.Stats) float64 {
					return float64(st.ByState[queue.Queued] + st.ByState[queue.Running] + st.ByState[queue.Retrying])
				}),
			newGauge("baton_dlq_pending", "Ops that failed for good and wait to be published to the dead-letter topic.",
				func(st queue.Stats) float64 { return float64(st.ByState[queue.DLQPending]) }),
			newGauge("baton_op_oldest_age_seconds", "Age of the oldest unfinished op (including dlq_pending); 0 when there is none.",
				func(st queue.Stats) float64 { return ageOf(st.OldestUnfinished) }),
			newGauge("baton_queue_file_bytes", "Size of the queue's bbolt file (queue.dir/queue.db) in bytes.",
				func(st queue.Stats) float64 { return float64(st.FileBytes) }),
			newGauge("baton_dlq_pending_age_seconds",
				"Age since acceptance of the oldest op waiting to be published to the dead-letter topic; 0 when none waits.",
				func(st queue.Stats) float64 { return ageOf(st.OldestDLQPending) }),
			newGauge("baton_queue_payload_bytes",
				"Payload bytes the queue keeps (unfinished and dead_lettered ops), the figure queue.max.bytes bounds.",
				func(st queue.Stats) float64 { return float64(st.PayloadBytes) }),
			newGauge("baton_ops_kept",
				"Dead-lettered ops whose letter went out without the payload, kept until replayed or discarded (baton ops discard).",
				func(st queue.Stats) float64 { return float64(st.Kept) }),
		},
	}
	for _, s := range queue.States {
		m.ops.WithLabelValues(string(s))
	}
	for _, r := range []string{"ok", "retry", "permanent"} {
		m.delivery.WithLabelValues(r)
	}
	return m
}

func (m *metrics) transition(to queue.State) { m.ops.WithLabelValues(string(to)).Inc() }

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.ops, m.dlqPublished, m.dlqElided, m.storeRetries, m.attempts, m.delivery, gauges{m}} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// gauges collects the queue's gauges from one Stats call per scrape (all
// 0 before the dispatcher has its queue).
type gauges struct{ m *metrics }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.m.byState
	for _, ga := range g.m.gauges {
		ch <- ga.desc
	}
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	var st queue.Stats
	if d := g.m.d; d != nil && d.store != nil {
		st = d.store.Stats()
	}
	for _, s := range queue.States {
		ch <- prometheus.MustNewConstMetric(g.m.byState, prometheus.GaugeValue, float64(st.ByState[s]), string(s))
	}
	for _, ga := range g.m.gauges {
		ch <- prometheus.MustNewConstMetric(ga.desc, prometheus.GaugeValue, ga.value(st))
	}
}

// deliveryResult labels one attempt for baton_op_delivery_seconds.
func deliveryResult(out outcome) string {
	switch {
	case out.err == nil && !out.cutShort:
		return "ok"
	case out.err != nil && retry.Classify(out.err).Class == retry.Permanent:
		return "permanent"
	}
	return "retry"
}
