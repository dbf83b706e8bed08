package sidecar

import (
	"slices"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Results of baton_lock_acquire_seconds.
const (
	resGranted        = "granted"
	resNotGranted     = "not_granted" // 423
	resUnavailable    = "unavailable" // 503 ZooKeeperUnavailable
	resTooManyWaiters = "too_many_waiters"
	resShuttingDown   = "shutting_down"
	resCanceled       = "canceled" // the caller went away
	resError          = "error"
)

// Results of baton_leases_total.
const (
	leaseGranted       = "granted"
	leaseReleased      = "released"
	leaseExpired       = "expired"
	leaseLost          = "lost"
	leaseProcessExited = "process_exited"
	leaseShutdown      = "shutdown"
)

// zkStates are the session states go-zookeeper reports, as metric labels.
var zkStates = []string{"unknown", "disconnected", "connecting", "connected", "has_session", "expired", "auth_failed"}

type metrics struct {
	acquire  *prometheus.HistogramVec
	leases   *prometheus.CounterVec
	fastpath *prometheus.CounterVec
	session  *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_lock_acquire_seconds",
			Help:    "Time acquires through the API took, by type and result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"type", "result"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_leases_total",
			Help: "Leases granted, and leases ended by result (released, expired, lost, process_exited, shutdown).",
		}, []string{"result"}),
		fastpath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_fastpath_total",
			Help: "One-multi uncontended acquire attempts: hit, or miss (another participant detected).",
		}, []string{"result"}),
		session: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_zk_session_state",
			Help: "1 for the ZooKeeper session's current state, 0 for the others.",
		}, []string{"state"}),
	}
	for _, r := range []string{leaseGranted, leaseReleased, leaseExpired, leaseLost, leaseProcessExited, leaseShutdown} {
		m.leases.WithLabelValues(r)
	}
	for _, r := range []string{"hit", "miss"} {
		m.fastpath.WithLabelValues(r)
	}
	m.setSession("disconnected")
	return m
}

func (m *metrics) setSession(state string) {
	for _, s := range zkStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.session.WithLabelValues(s).Set(v)
	}
	if !slices.Contains(zkStates, state) {
		m.session.WithLabelValues(state).Set(1)
	}
}

// register adds the server's collectors (and, for a registry the server
// made itself, the Go and process collectors) to reg.
func (s *Server) registerMetrics(reg prometheus.Registerer, own bool) error {
	cs := []prometheus.Collector{
		s.m.acquire, s.m.leases, s.m.fastpath, s.m.session, s.revokes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_locks_held", Help: "Grants the engine holds (API leases and background deliveries)."},
			func() float64 { return float64(s.eng.Health().Held) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_lock_waiters", Help: "Acquires waiting in a queue in ZooKeeper."},
			func() float64 { return float64(s.eng.Health().Waiting) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cleanup_pending", Help: "Deletes of our nodes waiting for a reconnect."},
			func() float64 { return float64(s.eng.Health().CleanupPending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_zk_connected", Help: "1 while the ZooKeeper session is established and connected."},
			func() float64 {
				if s.eng.Health().Connected {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_leases_active", Help: "Leases currently held through the API."},
			func() float64 { return float64(s.activeLeases()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_acquires_in_flight", Help: "API acquires in progress (counted against sidecar.max.waiters)."},
			func() float64 { return float64(s.waiters.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_lease_polls_in_flight", Help: "Lease long-polls (GET /v1/leases/{id}?wait=lost) in progress."},
			func() float64 { return float64(s.polls.Load()) }),
	}
	if own {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observer feeds engine events to the metrics and the session tracker.
type observer struct{ s *Server }

func (o observer) SessionState(state string) { o.s.onSession(zkStateLabel(state)) }

func (o observer) FastPath(hit bool) {
	if hit {
		o.s.m.fastpath.WithLabelValues("hit").Inc()
	} else {
		o.s.m.fastpath.WithLabelValues("miss").Inc()
	}
}

// zkStateLabel turns go-zookeeper's "StateHasSession" into "has_session".
func zkStateLabel(s string) string {
	s = strings.TrimPrefix(s, "State")
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}
