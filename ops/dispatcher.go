package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/queue"
	"github.com/batonhq/baton/retry"
)

// ErrDisabled is returned by methods that need the queue while ops are
// disabled (sidecar.app.url is empty).
var ErrDisabled = errors.New("ops: background operations are disabled (sidecar.app.url is empty)")

// Defaults of Deps and of the dispatcher's internal loops.
const (
	DefaultPublishTimeout = 10 * time.Second // one dead-letter publish, kafka-go retries included
	DefaultPurgeInterval  = time.Minute      // how often finished ops past queue.retention are purged
	dlqBackoffMin         = 100 * time.Millisecond
	dlqBackoffMax         = 5 * time.Second // cap of the wait between publish attempts while Kafka is down
	dlqBackstop           = 30 * time.Second
	dlqListLimit          = 64                     // ops listed per round (with payloads: bounds memory)
	dlqBatchLetters       = 64                     // below kafka-go's BatchSize (100): one record batch per partition
	pausePoll             = 100 * time.Millisecond // while ZooKeeper is unavailable
	releaseTimeout        = 10 * time.Second
	storeTimeout          = 30 * time.Second
	recordBackoffMin      = 50 * time.Millisecond // retrying a failed state write
	recordBackoffMax      = 2 * time.Second
)

// Deps are what a Dispatcher takes from its surroundings. A zero field
// means its documented default.
type Deps struct {
	// Engine grants the background locks; the sidecar's ([sidecar.Server.Engine]).
	// Required unless ops are disabled. The dispatcher never closes it.
	Engine *lock.Engine
	// Registry receives the dispatcher's metrics; nil registers none.
	Registry prometheus.Registerer
	// Logger receives structured logs; nil discards.
	Logger *slog.Logger
	// PublishTimeout bounds one dead-letter publish; default 10s. While
	// Kafka is unreachable each round of the publisher loop takes this long.
	PublishTimeout time.Duration
	// PurgeInterval is how often finished ops past queue.retention are
	// deleted; default 1 minute.
	PurgeInterval time.Duration
	// Hold, if set, is called before each delivery with its grant; it
	// returns the delivery's Baton-Lease-Id (random per attempt, sent only
	// in that header) and the func to call when the delivery is over (with
	// why: "" when the app answered) before the grant is released: the
	// sidecar lets the app re-enter the object's lock with that id, and
	// done returns only after the last validity told to those holders
	// ([sidecar.Server.HoldDelivery]). Without it the header is a random
	// id nothing accepts.
	Hold func(g *lock.Grant) (leaseID string, done func(reason string))
}

// settings are the "next" properties: read once per attempt.
type settings struct {
	policy     retry.Policy
	appTimeout time.Duration // sidecar.app.timeout
	lockWait   time.Duration // zookeeper.background.task.timeout; 0 = try once
	cleanup    time.Duration // sidecar.app.preempt.cleanup
	appToken   string        // sidecar.app.token.file's content (trimmed); "" = none
}

// Dispatcher turns the durable queue into deliveries: it accepts ops over
// HTTP ([Dispatcher.Handler]), delivers them to the app under the object's
// background lock ([Dispatcher.Run]), retries them with backoff and
// publishes those that fail for good to the dead-letter topic. Its methods
// are safe for concurrent use.
type Dispatcher struct {
	log     *slog.Logger
	nodeID  string
	eng     *lock.Engine
	hold    func(g *lock.Grant) (leaseID string, done func(reason string)) // Deps.Hold
	store   *queue.Store                                                   // nil when disabled
	pub     *dlq.Publisher
	brokers string // kafka.brokers, for messages
	app     *appClient
	m       *metrics
	set     atomic.Pointer[settings]
	purgeIv time.Duration
	workers int

	// soft ends claiming and lock waits: Drain, the end of Run's ctx, Close.
	soft       context.Context
	softCancel context.CancelFunc
	// hard cuts in-flight deliveries and publishes short: Drain's ctx
	// ending, Close. Ops cut short are given back uncounted.
	hard       context.Context
	hardCancel context.CancelFunc

	mu            sync.Mutex
	running       bool           // Run was called
	wg            sync.WaitGroup // Run's goroutines
	paused        atomic.Bool    // workers wait for ZooKeeper
	everConnected atomic.Bool
	dlqWake       chan struct{} // cap 1: a dlq_pending op appeared
	ackMu         sync.Mutex
	acked         map[string]ackedLetter // published, record still to write (dlqLoop)
	unsendable    map[string]bool        // ops whose letter cannot be sent, logged once
	closed        atomic.Bool            // Close has begun
	closeMu       sync.Mutex             // serializes Close

	hook func(event) // tests: called after every attempt
}

// New builds a Dispatcher from the configuration: it opens the queue in
// queue.dir (created 0700; the directory's file lock allows one sidecar per
// dir), builds the retry policy (retry.*, elastic.request.retry.count), the
// dead-letter publisher (kafka.brokers, kafka.dlq.topic, kafka.tls.*,
// kafka.sasl.*: their files are read here, an unreadable one is an error; it
// connects on the first publish, where a refused password or an untrusted
// certificate is an error naming the key) and the app client (sidecar.app.url). With an empty
// sidecar.app.url ops are disabled: nothing is opened, the handler answers
// 503 OpsDisabled and Run only waits for its ctx. Call Close when done.
func New(cfg props.Config, deps Deps) (*Dispatcher, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.PublishTimeout < 0 || deps.PurgeInterval < 0 {
		return nil, errors.New("ops: Deps.PublishTimeout and Deps.PurgeInterval must not be negative")
	}
	if deps.PublishTimeout == 0 {
		deps.PublishTimeout = DefaultPublishTimeout
	}
	if deps.PurgeInterval == 0 {
		deps.PurgeInterval = DefaultPurgeInterval
	}
	d := &Dispatcher{
		log:     deps.Logger.With("component", "ops"),
		nodeID:  cfg.NodeID,
		eng:     deps.Engine,
		hold:    deps.Hold,
		m:       newMetrics(),
		purgeIv: deps.PurgeInterval,
		dlqWake: make(chan struct{}, 1),
	}
	d.soft, d.softCancel = context.WithCancel(context.Background())
	d.hard, d.hardCancel = context.WithCancel(context.Background())
	fail := func(err error) (*Dispatcher, error) {
		d.Close()
		return nil, err
	}
	d.m.d = d
	if deps.Registry != nil {
		if err := d.m.register(deps.Registry); err != nil {
			return fail(fmt.Errorf("ops: metrics: %w", err))
		}
	}
	if cfg.AppURL == "" {
		d.log.Info("background operations disabled (sidecar.app.url is empty)")
		return d, nil
	}
	if deps.Engine == nil {
		return fail(errors.New("ops: Deps.Engine is required when sidecar.app.url is set"))
	}
	s, err := settingsOf(cfg)
	if err != nil {
		return fail(err)
	}
	d.set.Store(s)
	if cfg.QueueWorkers < 1 {
		return fail(fmt.Errorf("ops: queue.workers: %d, want at least 1", cfg.QueueWorkers))
	}
	ep, err := props.ParseAppURL(cfg.AppURL)
	if err != nil {
		return fail(fmt.Errorf("ops: sidecar.app.url: %w", err))
	}
	d.app = newAppClient(ep)
	sec, err := dlq.NewSecurity(DLQSecurity(cfg))
	if err != nil {
		return fail(fmt.Errorf("ops: %w", err))
	}
	d.pub, err = dlq.NewPublisher(dlq.PublisherOptions{
		Brokers: cfg.KafkaBrokers, Topic: cfg.DLQTopic, Timeout: deps.PublishTimeout, Logger: deps.Logger, Security: sec,
	})
	if err != nil {
		return fail(fmt.Errorf("ops: %w", err))
	}
	d.store, err = queue.Open(cfg.QueueDir, queue.Options{
		MaxOps: cfg.QueueMaxOps, MaxBytes: cfg.QueueMaxBytes, Retention: cfg.QueueRetention, Logger: deps.Logger,
	})
	if err != nil {
		return fail(fmt.Errorf("ops: %w", err))
	}
	d.workers = cfg.QueueWorkers
	d.brokers = strings.Join(cfg.KafkaBrokers, ",")
	d.log.Info("background operations enabled", "app_url", cfg.AppURL, "queue_dir", cfg.QueueDir,
		"workers", cfg.QueueWorkers, "dlq_topic", cfg.DLQTopic)
	return d, nil
}

func settingsOf(cfg props.Config) (*settings, error) {
	p := retry.Policy{
		InitialInterval: cfg.RetryInitial,
		MaxInterval:     cfg.RetryMax,
		Multiplier:      cfg.RetryMultiplier,
		Randomization:   cfg.RetryRandomization,
		MaxRetries:      cfg.RetryCount,
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("ops: %w", err)
	}
	if cfg.AppTimeout <= 0 {
		return nil, fmt.Errorf("ops: sidecar.app.timeout: %v, want a positive duration", cfg.AppTimeout)
	}
	if cfg.BackgroundTimeout < 0 {
		return nil, fmt.Errorf("ops: zookeeper.background.task.timeout: %v, want 0 or more", cfg.BackgroundTimeout)
	}
	set := &settings{policy: p, appTimeout: cfg.AppTimeout, lockWait: cfg.BackgroundTimeout, cleanup: max(cfg.AppPreemptCleanup, 0)}
	if cfg.AppTokenFile != "" { // re-read at every reload
		tok, err := props.ReadAppToken(cfg.AppTokenFile)
		if err != nil {
			return nil, fmt.Errorf("ops: sidecar.app.token.file %s: %w", cfg.AppTokenFile, err)
		}
		set.appToken = tok
	}
	return set, nil
}

// Enabled reports whether background operations are enabled (sidecar.app.url
// is set).
func (d *Dispatcher) Enabled() bool { return d != nil && d.store != nil }

// Ready reports why the dispatcher cannot take ops (for /readyz), or nil.
// Disabled ops are not a reason: the sidecar is ready for locks. A nil
// Dispatcher is ready (so a closure can refer to one not yet built).
func (d *Dispatcher) Ready() error {
	if d == nil || d.store == nil {
		return nil
	}
	if d.closed.Load() {
		return errors.New("queue closed")
	}
	return nil
}

// Reload applies a reloaded configuration: the retry policy, the app
// timeout, the background lock wait and the app token (sidecar.app.token.file,
// read again) to attempts started afterwards
// (ops already retrying keep their scheduled time), queue.max.ops,
// queue.max.bytes and queue.retention at once. Restart keys (queue.dir, queue.workers,
// sidecar.app.url, kafka.*) are ignored here. On error nothing changes.
func (d *Dispatcher) Reload(cfg props.Config) error {
	if d == nil || d.store == nil {
		return nil
	}
	s, err := settingsOf(cfg)
	if err != nil {
		return err
	}
	if cfg.QueueMaxBytes != 0 {
		if err := d.store.SetMaxBytes(cfg.QueueMaxBytes); err != nil {
			return fmt.Errorf("ops: %w", err)
		}
	}
	if err := d.store.SetLimits(cfg.QueueMaxOps, cfg.QueueRetention); err != nil {
		return fmt.Errorf("ops: %w", err)
	}
	d.set.Store(s)
	return nil
}

// Run runs the dispatcher until ctx ends or [Dispatcher.Drain] has stopped
// it: queue.workers workers, the dead-letter publisher loop and the
// periodic purge of finished ops. When ctx ends, workers stop claiming and
// finish the attempt in progress (bounded by the lock wait and
// sidecar.app.timeout, or cut short by Drain's deadline or Close, which give
// the op back uncounted); Run returns once they have. With ops disabled it
// just waits for ctx. Run may be called once; it returns nil.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		return errors.New("ops: Run called twice")
	}
	d.running = true
	if d.store == nil {
		d.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-d.soft.Done():
		}
		return nil
	}
	if d.soft.Err() != nil { // drained or closed before Run
		d.mu.Unlock()
		return nil
	}
	for i := range d.workers {
		d.wg.Go(func() { d.work(i) })
	}
	d.wg.Go(d.dlqLoop)
	d.wg.Go(d.purgeLoop)
	d.mu.Unlock()
	stop := context.AfterFunc(ctx, d.softCancel)
	defer stop()
	d.wg.Wait()
	return nil
}

// Drain stops claiming ops and waits for the attempts in progress to finish.
// When ctx ends first, the deliveries still running are cancelled and their
// ops given back to the queue without counting an attempt. It returns once
// every worker has stopped; Run then returns. The sidecar calls it when
// shutdown begins, before closing the lock engine.
func (d *Dispatcher) Drain(ctx context.Context) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.softCancel()
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
		d.log.Warn("shutdown grace over: cancelling deliveries in progress; their ops go back to the queue")
		d.hardCancel()
		<-done
	}
}

// Close stops everything Run started (in-flight deliveries are cancelled and
// their ops given back uncounted), waits for it, and closes the dead-letter
// publisher and the queue. It is idempotent.
func (d *Dispatcher) Close() error {
	if d == nil {
		return nil
	}
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	d.mu.Lock()
	d.softCancel()
	d.hardCancel()
	d.mu.Unlock()
	d.wg.Wait()
	var errs []error
	if d.app != nil {
		d.app.close()
	}
	if d.pub != nil {
		errs = append(errs, d.pub.Close())
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	return errors.Join(errs...)
}

// event describes one finished attempt (for tests).
type event struct {
	ID       string
	Object   string
	Attempt  int       // 1-based
	Start    time.Time // claim
	Failed   time.Time // the instant the retry decision was taken from (failures only)
	End      time.Time // outcome recorded
	Outcome  string    // "done", "retrying", "dlq_pending", "requeued"
	Class    string    // error class ("" when done or requeued)
	NextAt   time.Time // retrying: when the next attempt may start
	Token    int64     // fencing token of the grant, 0 if not granted
	ErrorMsg string
}
