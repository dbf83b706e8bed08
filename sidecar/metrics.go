package sidecar

import (
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/batonhq/baton/api"
)

// Results of baton_lock_acquire_seconds.
const (
	resGranted        = "granted"
	resNotGranted     = "not_granted" // 423 to a try-once (wait_ms 0): held right now
	resTimeout        = "timeout"     // 423 after waiting wait_ms
	resUnavailable    = "unavailable" // 503 ZooKeeperUnavailable
	resTooManyWaiters = "too_many_waiters"
	resShuttingDown   = "shutting_down"
	resRefused        = "refused"  // 403 Forbidden, 429 TooManyRequests (auth.go, caps.go), 409 SharedNeedsNative and NotNative
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

// acquireResults are the results of baton_lock_acquire_seconds.
var acquireResults = []string{
	resGranted, resNotGranted, resTimeout, resUnavailable, resTooManyWaiters, resShuttingDown, resRefused, resCanceled, resError,
}

// lockTypes are the type labels.
var lockTypes = []string{api.Foreground, api.Background}

// Values of baton_zk_session_state's state label: exactly one is 1, and
// "connected" is 1 exactly when baton_zk_connected is (both come from one
// look at the engine per scrape).
const (
	zkConnected    = "connected"    // session established and connected
	zkDisconnected = "disconnected" // connecting, or connected without a session yet
	zkExpired      = "expired"      // the last session expired; a new one is being made
	zkAuthFailed   = "auth_failed"  // zookeeper.auth.digest refused
)

var zkStates = []string{zkConnected, zkDisconnected, zkExpired, zkAuthFailed}

type metrics struct {
	acquire  *prometheus.HistogramVec
	hold     *prometheus.HistogramVec
	leases   *prometheus.CounterVec
	fastpath *prometheus.CounterVec
	session  *zkCollector
	orphans  prometheus.Counter
	// the series of the request path, looked up once: WithLabelValues
	// hashes the labels and takes the vector's lock on every call (five
	// times per lock cycle). Read-only after newMetrics.
	acquireBy map[[2]string]prometheus.Observer // type, result
	holdBy    map[[2]string]prometheus.Observer // type, result
	leasesBy  map[string]prometheus.Counter     // result
	fastHit   prometheus.Counter
	fastMiss  prometheus.Counter
}

// observeAcquire records an acquire's time under its type and result.
func (m *metrics) observeAcquire(typ, result string, seconds float64) {
	if o, ok := m.acquireBy[[2]string{typ, result}]; ok {
		o.Observe(seconds)
		return
	}
	m.acquire.WithLabelValues(typ, result).Observe(seconds)
}

// observeHold records a lease's hold time under its type and result.
func (m *metrics) observeHold(typ, result string, seconds float64) {
	if o, ok := m.holdBy[[2]string{typ, result}]; ok {
		o.Observe(seconds)
		return
	}
	m.hold.WithLabelValues(typ, result).Observe(seconds)
}

// countLease counts a lease granted or ended by result.
func (m *metrics) countLease(result string) {
	if c, ok := m.leasesBy[result]; ok {
		c.Inc()
		return
	}
	m.leases.WithLabelValues(result).Inc()
}

// newMetrics makes the server's metrics, every series of a known label set
// already at 0.
func newMetrics() *metrics {
	m := &metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_lock_acquire_seconds",
			Help:    "Time acquires through the API took, by type and result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"type", "result"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_lock_hold_seconds",
			Help: "How long API leases held their lock, from the grant to the end, by type and how the lease ended (released, expired, lost, " +
				"process_exited, shutdown).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1 ms .. ~70 min
		}, []string{"type", "result"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_leases_total",
			Help: "Leases granted, and leases ended by result (released, expired, lost, process_exited, shutdown).",
		}, []string{"result"}),
		fastpath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_fastpath_total",
			Help: "One-multi uncontended acquire attempts: hit, or miss (another participant detected).",
		}, []string{"result"}),
		session: newZKCollector(),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_orphans_deleted_total",
			Help: "Nodes of this sidecar's own ZooKeeper session that no acquire or grant owned, deleted by the engine's audit (each is also a WARN naming " +
				"it). Not 0: a bug left them; report it.",
		}),
	}
	m.acquireBy, m.holdBy, m.leasesBy = map[[2]string]prometheus.Observer{}, map[[2]string]prometheus.Observer{}, map[string]prometheus.Counter{}
	ended := []string{leaseReleased, leaseExpired, leaseLost, leaseProcessExited, leaseShutdown}
	for _, r := range append([]string{leaseGranted}, ended...) {
		m.leasesBy[r] = m.leases.WithLabelValues(r)
	}
	// Every series exists from the start, so that rate() and absent-based
	// alerts see a 0 rather than nothing.
	for _, typ := range lockTypes {
		for _, r := range acquireResults {
			m.acquireBy[[2]string{typ, r}] = m.acquire.WithLabelValues(typ, r)
		}
		for _, r := range ended {
			m.holdBy[[2]string{typ, r}] = m.hold.WithLabelValues(typ, r)
		}
	}
	m.fastHit, m.fastMiss = m.fastpath.WithLabelValues("hit"), m.fastpath.WithLabelValues("miss")
	return m
}

// setSession records the last session event (go-zookeeper's state, as a
// label: "has_session", "expired", …).
func (m *metrics) setSession(state string) { m.session.last.Store(state) }

// zkCollector collects the session gauges from one engine Health per
// scrape, so that they agree with each other.
type zkCollector struct {
	s         *Server
	last      atomic.Value // string: the last session event
	connected *prometheus.Desc
	state     *prometheus.Desc
	timeout   *prometheus.Desc
	down      *prometheus.Desc
	failing   *prometheus.Desc
}

func newZKCollector() *zkCollector {
	c := &zkCollector{
		connected: prometheus.NewDesc("baton_zk_connected", "1 while the ZooKeeper session is established and connected.", nil, nil),
		state: prometheus.NewDesc("baton_zk_session_state",
			"1 for the ZooKeeper session's state, 0 for the others: connected (= baton_zk_connected), disconnected (connecting, no session yet), expired, "+
				"auth_failed.", []string{"state"}, nil),
		timeout: prometheus.NewDesc("baton_zk_session_timeout_seconds", "Negotiated ZooKeeper session timeout; 0 before the first session.", nil, nil),
		down: prometheus.NewDesc("baton_zk_disconnected_seconds",
			"How long the sidecar has been without a connected ZooKeeper session; 0 while connected.", nil, nil),
		failing: prometheus.NewDesc("baton_zk_connect_failing",
			"1 while connecting to ZooKeeper keeps failing (the last error is in /healthz and the WARN log), else 0.", nil, nil),
	}
	c.last.Store("disconnected")
	return c
}

func (c *zkCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.connected
	ch <- c.state
	ch <- c.timeout
	ch <- c.down
	ch <- c.failing
}

// Collect reads the engine's health once and reports the session gauges
// from it, so that they agree.
func (c *zkCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.s.eng.Health()
	state := zkDisconnected
	switch last, _ := c.last.Load().(string); {
	case h.Connected:
		state = zkConnected
	case last == "expired":
		state = zkExpired
	case last == "auth_failed":
		state = zkAuthFailed
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, b(h.Connected))
	for _, st := range zkStates {
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, b(st == state), st)
	}
	ch <- prometheus.MustNewConstMetric(c.timeout, prometheus.GaugeValue, h.Timeout.Seconds())
	down := 0.0
	if !h.Connected {
		down = c.s.sess.disconnectedFor().Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.down, prometheus.GaugeValue, down)
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, b(h.LastError != ""))
}

// register adds the collectors of s (and, for a registry the server made
// itself, the Go and process collectors) to s.reg.
func (m *metrics) register(s *Server, own bool) error {
	reg := s.reg
	m.session.s = s
	if err := reg.Register(m.hold); err != nil {
		return err
	}
	cs := []prometheus.Collector{
		m.acquire, m.leases, m.fastpath, m.session, s.leases.revokes, m.orphans,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_locks_held", Help: "Grants the engine holds (API leases and background deliveries)."},
			func() float64 { return float64(s.eng.Health().Held) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_lock_waiters", Help: "Acquires waiting: in a queue in ZooKeeper, or parked."},
			func() float64 { return float64(s.eng.Health().Waiting) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_lock_parked",
			Help: "Acquires parked behind a holder of this sidecar (native protocol): waiting here, not yet in ZooKeeper."},
			func() float64 { return float64(s.eng.Health().Parked) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_cleanup_pending", Help: "Deletes of our nodes waiting for a reconnect."},
			func() float64 { return float64(s.eng.Health().CleanupPending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_leases_active", Help: "Leases currently held through the API."},
			func() float64 { return float64(s.leases.active()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_acquires_in_flight",
			Help: "API acquires in progress (counted against sidecar.max.waiters)."},
			func() float64 { return float64(s.waiters.Load()) }),
		waitersByType{s},
		lockDelaysMetric(s), // delay.go
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "baton_lease_polls_in_flight",
			Help: "Lease long-polls (GET /v1/leases/{id}?wait=lost) in progress."},
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

// waitersByType collects baton_acquires_waiting.
type waitersByType struct{ s *Server }

var waitingDesc = prometheus.NewDesc("baton_acquires_waiting",
	"API acquires in progress, by type (their sum is baton_acquires_in_flight; background op deliveries waiting are in baton_lock_waiters only).",
	[]string{"type"}, nil)

func (w waitersByType) Describe(ch chan<- *prometheus.Desc) { ch <- waitingDesc }

func (w waitersByType) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(w.s.waitingFG.Load()), api.Foreground)
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(w.s.waitingBG.Load()), api.Background)
}

// observer feeds engine events to the metrics and the session tracker.
type observer struct{ s *Server }

func (o observer) SessionState(state string) {
	label := zkStateLabel(state)
	o.s.m.setSession(label)
	o.s.sess.event(label)
}

func (o observer) FastPath(hit bool) {
	if hit {
		o.s.m.fastHit.Inc()
	} else {
		o.s.m.fastMiss.Inc()
	}
}

// OrphanDeleted counts a node the engine's audit deleted (lock.OrphanObserver).
func (o observer) OrphanDeleted(object, node string) { o.s.m.orphans.Inc() }

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
