package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/internal/notify"
)

// Errors returned by the Store; test with errors.Is.
var (
	ErrInvalid         = errors.New("queue: invalid op")                        // wrapped by *FieldError
	ErrConflict        = errors.New("queue: op id known with a different body") // HTTP 409 Conflict
	ErrQueueFull       = errors.New("queue: queue full")                        // wrapped by *FullError
	ErrNotFound        = errors.New("queue: no such op")                        // HTTP 404
	ErrNotDeadLettered = errors.New("queue: op is not dead-lettered")           // Replay refused: HTTP 409
	ErrState           = errors.New("queue: op is not in the required state")
	ErrNoneRunnable    = errors.New("queue: no runnable op")
	ErrClosed          = errors.New("queue: store closed")
	ErrLocked          = errors.New("queue: directory in use by another sidecar")
)

// Defaults of Options (README, Properties).
const (
	DefaultMaxOps     = 100000
	DefaultMaxBytes   = 256 << 20
	DefaultRetention  = 7 * 24 * time.Hour
	DefaultPurgeLimit = 1000
	DefaultBatchDelay = time.Millisecond
	DefaultBatchSize  = 1000
)

// Options configures a Store. A zero field means its documented default; a
// negative one is an error naming the field.
type Options struct {
	// MaxOps bounds accepted, unfinished ops (queue.max.ops); beyond it
	// Submit fails with ErrQueueFull. Default 100000.
	MaxOps int
	// MaxBytes bounds the payload bytes the store keeps (queue.max.bytes):
	// those of unfinished ops and of dead_lettered ones (kept for replay);
	// a submit that would pass it fails with a *FullError (Key
	// "queue.max.bytes"). Default DefaultMaxBytes (256 MiB); at least
	// MaxPayloadBytes.
	MaxBytes int64
	// Retention is how long finished ops stay queryable and idempotent
	// (queue.retention). Default 7 days.
	Retention time.Duration
	// PurgeLimit bounds the ops one Purge call deletes. Default 1000.
	PurgeLimit int
	// BatchDelay is how long a write waits for others to share its fsync
	// (bbolt MaxBatchDelay). Default 1ms.
	BatchDelay time.Duration
	// BatchSize is the most writes sharing one fsync (bbolt MaxBatchSize).
	// Default 1000.
	BatchSize int
	// Now is the clock for AcceptedAt, attempt and finish times. Default
	// time.Now.
	Now func() time.Time
	// Logger receives operational messages. Nil discards.
	Logger *slog.Logger
}

func (o *Options) fill() error {
	checks := []struct {
		name string
		neg  bool
	}{
		{"MaxOps", o.MaxOps < 0}, {"MaxBytes", o.MaxBytes < 0}, {"Retention", o.Retention < 0}, {"PurgeLimit", o.PurgeLimit < 0},
		{"BatchDelay", o.BatchDelay < 0}, {"BatchSize", o.BatchSize < 0},
	}
	for _, c := range checks {
		if c.neg {
			return fmt.Errorf("queue: Options.%s must not be negative", c.name)
		}
	}
	if o.MaxOps == 0 {
		o.MaxOps = DefaultMaxOps
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxBytes < MaxPayloadBytes {
		return fmt.Errorf("queue: Options.MaxBytes %d is below one op's largest payload (%d)", o.MaxBytes, MaxPayloadBytes)
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.PurgeLimit == 0 {
		o.PurgeLimit = DefaultPurgeLimit
	}
	if o.BatchDelay == 0 {
		o.BatchDelay = DefaultBatchDelay
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Bucket names. Keys of bOpen are objKey(object, seq) → id for every op in
// queued/running/retrying/dlq_pending; keys of bFinished are
// be64(finished_at ms) + id → state, in finish order for Purge. Keys of
// bKept are the ids of dead_lettered ops whose dead letter went out
// without the payload (Op.Kept): the store has the only whole copy, so
// they are not in bFinished and Purge never deletes them; Replay or Discard
// ends them. Meta kPayloadBytes is the sum of the values' lengths in
// bPayloads, kept in the transaction that changes them.
var (
	bMeta     = []byte("meta")
	bOps      = []byte("ops")      // id → Op JSON without payload
	bPayloads = []byte("payloads") // id → raw payload JSON
	bSeqs     = []byte("seqs")     // object → be64 last seq
	bOpen     = []byte("open")
	bFinished = []byte("finished")
	bKept     = []byte("kept")
	kVersion  = []byte("version")
	version   = []byte("1")

	kPayloadBytes = []byte("payload_bytes")
)

// Store is the durable op store. Open one per queue directory.
type Store struct {
	dir  string
	path string // dir/queue.db
	// dbMu guards db: every use holds it shared (see view, update, batch);
	// Compact holds it exclusively while it replaces the file.
	dbMu sync.RWMutex
	db   *bolt.DB
	// compactAfter (unix ns): Compact does nothing before it (set after a
	// failure).
	compactAfter atomic.Int64
	lock         *os.File
	log          *slog.Logger
	now          func() time.Time

	mu         sync.Mutex
	maxOps     int
	maxBytes   int64
	retention  time.Duration
	purgeLimit int
	closed     bool
	calls      sync.WaitGroup   // in-flight public calls, waited for by Close
	changed    notify.Broadcast // something may have become claimable
	done       chan struct{}    // closed by Close
	busy       map[string]chan struct{}
	sched      scheduler
	pending    int // submits and replays between seq assignment and commit
	finished   map[State]int
	kept       int   // dead_lettered ops kept until replayed or discarded (in finished too)
	bytes      int64 // payload bytes stored (meta kPayloadBytes)
	pendBytes  int64 // payload bytes of submits between reserve and settle
	closeOnce  sync.Once
	closeErr   error
}

// Open opens (creating if needed) the store in dir, takes the directory's
// file lock, and recovers from a crash: every running op goes back to queued
// with its attempts unchanged.
func Open(dir string, opts Options) (*Store, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, errors.New("queue: queue.dir is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("queue: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	db, err := openCompacted(filepath.Join(dir, "queue.db"), opts.Logger.With("component", "queue"))
	if err != nil {
		lock.Close()
		return nil, err
	}
	db.MaxBatchDelay = opts.BatchDelay
	db.MaxBatchSize = opts.BatchSize
	s := &Store{
		dir: dir, path: db.Path(), db: db, lock: lock, log: opts.Logger.With("component", "queue"), now: opts.Now,
		maxOps: opts.MaxOps, maxBytes: opts.MaxBytes, retention: opts.Retention, purgeLimit: opts.PurgeLimit,
		done: make(chan struct{}),
		busy: map[string]chan struct{}{}, finished: map[State]int{},
	}
	s.sched.init()
	requeued, err := s.recover()
	if err != nil {
		db.Close()
		lock.Close()
		return nil, err
	}
	st := s.Stats()
	s.log.Info("queue opened", "dir", dir, "unfinished", st.Unfinished, "requeued", requeued,
		"done", st.ByState[Done], "dead_lettered", st.ByState[DeadLettered], "kept", st.Kept,
		"payload_bytes", st.PayloadBytes)
	return s, nil
}

// Compaction: bbolt reuses freed pages but never gives them back to the
// file system, so a file that grew (a backlog of large payloads) stays that
// size. Open rewrites it into a new file (bbolt's Compact) when it is at
// least compactMinBytes and at least compactFreeRatio of it is free pages;
// [Store.Compact] does the same while the store runs when, in addition, the
// live data is at most compactLiveMax (every call waits meanwhile).
const (
	compactMinBytes  = 4 << 20
	compactFreeRatio = 0.5
	compactLiveMax   = 256 << 20
	compactTxBytes   = 16 << 20
	// compactRetryAfter is how long Compact waits after a failure (e.g. a
	// file system without hard links) before trying again.
	compactRetryAfter = time.Hour
)

func boltOptions() *bolt.Options {
	return &bolt.Options{
		Timeout:        time.Second, // the LOCK file already excludes other processes
		NoFreelistSync: true,        // freelist rebuilt at open; commits still fsync the data
		FreelistType:   bolt.FreelistMapType,
	}
}

// openCompacted opens the bbolt file at path, compacting it first when
// mostly free. A compaction that fails is logged and the file used as it is.
func openCompacted(path string, log *slog.Logger) (*bolt.DB, error) {
	_ = os.Remove(path + ".compact") // left by a crash during a compaction
	_ = os.Remove(path + ".old")
	db, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		return nil, fmt.Errorf("queue: open %s: %w", path, err)
	}
	if size, free, ok := fileUse(db); ok && worthCompacting(size, free, false) {
		db = compactLogged(db, log, size)
	}
	return db, nil
}

// fileUse returns the file's size and its free bytes.
func fileUse(db *bolt.DB) (size, free int64, ok bool) {
	fi, err := os.Stat(db.Path())
	if err != nil {
		return 0, 0, false
	}
	pageSize := 0
	// Info reads the mmap'ed data: only inside a transaction (which holds
	// bbolt's mmap lock) is that safe from a concurrent remap.
	if err := db.View(func(tx *bolt.Tx) error { pageSize = tx.DB().Info().PageSize; return nil }); err != nil {
		return 0, 0, false
	}
	st := db.Stats()
	return fi.Size(), int64(st.FreePageN+st.PendingPageN) * int64(pageSize), true
}

func worthCompacting(size, free int64, running bool) bool {
	if size < compactMinBytes || float64(free) < compactFreeRatio*float64(size) {
		return false
	}
	return !running || size-free <= compactLiveMax
}

// compactLogged compacts db (see compactFile) and logs the outcome. It
// returns the database to use.
func compactLogged(db *bolt.DB, log *slog.Logger, before int64) *bolt.DB {
	start := time.Now()
	path := db.Path()
	ndb, err := compactFile(db)
	if err != nil {
		log.Warn("compacting the queue file failed; using it as it is", "path", path, "bytes", before, "error", err)
		return ndb
	}
	after := int64(0)
	if fi, err := os.Stat(path); err == nil {
		after = fi.Size()
	}
	log.Info("queue file compacted", "path", path, "before_bytes", before, "after_bytes", after,
		"took", time.Since(start).Round(time.Millisecond))
	return ndb
}

// compactFile rewrites db's file compactly and returns the database opened
// on the new file, the old one closed. Nobody may use db meanwhile. Steps:
// bbolt's Compact into path.compact (fsynced), a hard link path.old to the
// current file, rename path.compact over path, open it; only then is the
// old database closed and path.old removed. On any failure the old file is
// put back under path (if it was moved) and db is returned, still open, with
// the error. A crash at any point leaves path a complete database (the old
// or the new); Open removes the leftovers.
func compactFile(db *bolt.DB) (*bolt.DB, error) {
	path := db.Path()
	tmp, old := path+".compact", path+".old"
	_ = os.Remove(tmp)
	_ = os.Remove(old)
	if err := compactInto(db, tmp); err != nil {
		_ = os.Remove(tmp)
		return db, err
	}
	if err := os.Link(path, old); err != nil {
		_ = os.Remove(tmp)
		return db, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(old)
		return db, err
	}
	syncDir(filepath.Dir(path))
	ndb, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		if rerr := os.Rename(old, path); rerr != nil {
			return db, fmt.Errorf("%w; putting the old file back failed too: %v", err, rerr)
		}
		syncDir(filepath.Dir(path))
		return db, err
	}
	ndb.MaxBatchDelay, ndb.MaxBatchSize = db.MaxBatchDelay, db.MaxBatchSize
	_ = db.Close()
	_ = os.Remove(old)
	return ndb, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// compactInto copies db into a new, fsynced bbolt file at tmp.
func compactInto(db *bolt.DB, tmp string) error {
	dst, err := bolt.Open(tmp, 0o600, boltOptions())
	if err != nil {
		return err
	}
	if err := bolt.Compact(dst, db, compactTxBytes); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// Compact rewrites the queue file compactly when it is at least 4 MiB, at
// least half of it is free pages and the live data is at most 256 MiB; it
// reports whether it did. Every other call waits while it copies (about a
// second per 100-200 MiB of live data). Call it periodically (the
// dispatcher does after each purge); Open compacts too, without the live
// data bound.
func (s *Store) Compact() (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	if time.Now().UnixNano() < s.compactAfter.Load() {
		return false, nil // failed lately
	}
	s.dbMu.RLock()
	size, free, ok := fileUse(s.db)
	s.dbMu.RUnlock()
	if !ok || !worthCompacting(size, free, true) {
		return false, nil
	}
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	start := time.Now()
	ndb, err := compactFile(s.db)
	s.db = ndb
	if err != nil {
		s.compactAfter.Store(time.Now().Add(compactRetryAfter).UnixNano())
		s.log.Warn("compacting the queue file failed; using it as it is, next try in an hour", "path", s.path, "bytes", size, "error", err)
		return false, fmt.Errorf("queue: compact %s: %w", s.path, err)
	}
	after, _, _ := fileUse(ndb)
	s.log.Info("queue file compacted", "path", s.path, "before_bytes", size, "after_bytes", after,
		"took", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// view, update and batch run a bbolt transaction on the current file.
func (s *Store) view(fn func(*bolt.Tx) error) error {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.db.View(fn)
}

func (s *Store) update(fn func(*bolt.Tx) error) error {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.db.Update(fn)
}

func (s *Store) batch(fn func(*bolt.Tx) error) error {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.db.Batch(fn)
}

// lockDir takes an exclusive, non-blocking flock on dir/LOCK and writes our
// pid into it. flock belongs to the open file description, so a second Open
// in the same process fails too.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("queue: open lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner := ""
			if b, rerr := os.ReadFile(path); rerr == nil && len(bytes.TrimSpace(b)) > 0 {
				owner = " (pid " + strings.TrimSpace(string(b)) + ")"
			}
			return nil, fmt.Errorf("%w: queue.dir %s is locked by another sidecar%s (flock on %s); "+
				"give each sidecar its own queue.dir", ErrLocked, dir, owner, path)
		}
		return nil, fmt.Errorf("queue: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// recover creates the buckets, puts running ops back to queued and loads the
// unfinished ops into the scheduler.
func (s *Store) recover() (requeued int, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bMeta, bOps, bPayloads, bSeqs, bOpen, bFinished, bKept} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bMeta)
		if v := meta.Get(kVersion); v == nil {
			if err := meta.Put(kVersion, version); err != nil {
				return err
			}
		} else if !bytes.Equal(v, version) {
			return fmt.Errorf("queue: unsupported store version %q (want %q)", v, version)
		}
		ops := tx.Bucket(bOps)
		err := tx.Bucket(bOpen).ForEach(func(k, id []byte) error {
			op, err := getOp(ops, string(id))
			if err != nil {
				return err
			}
			if op.State == Running {
				// Cut short by a crash: not a failed attempt.
				op.State = Queued
				if err := putOp(ops, op); err != nil {
					return err
				}
				requeued++
			}
			s.sched.load(op, readSeq(tx, op.Object))
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Bucket(bFinished).ForEach(func(k, v []byte) error {
			s.finished[State(v)]++
			return nil
		})
		if err != nil {
			return err
		}
		s.kept = tx.Bucket(bKept).Stats().KeyN
		s.finished[DeadLettered] += s.kept
		if v := meta.Get(kPayloadBytes); len(v) == 8 {
			s.bytes = int64(binary.BigEndian.Uint64(v))
			return nil
		}
		// A store written before the count existed: sum it once.
		err = tx.Bucket(bPayloads).ForEach(func(_, v []byte) error {
			s.bytes += int64(len(v))
			return nil
		})
		if err != nil {
			return err
		}
		return meta.Put(kPayloadBytes, be64(uint64(s.bytes)))
	})
	if err != nil {
		return 0, fmt.Errorf("queue: recover %s: %w", s.dir, err)
	}
	return requeued, nil
}

// Close waits for in-flight calls, closes the database and releases the
// directory lock. Blocked Next calls return ErrClosed. Idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.mu.Unlock()
		s.calls.Wait()
		s.dbMu.Lock()
		s.closeErr = s.db.Close()
		s.dbMu.Unlock()
		if err := s.lock.Close(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
		s.log.Info("queue closed", "dir", s.dir)
	})
	return s.closeErr
}

// enter registers an in-flight call; it fails once Close has begun.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.calls.Add(1)
	return nil
}

func (s *Store) leave() { s.calls.Done() }

// enterID enters the store (enter) and takes op id's lock (lockID): the
// start of every change to one op. done releases both.
func (s *Store) enterID(ctx context.Context, id string) (done func(), err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	unlock, err := s.lockID(ctx, id)
	if err != nil {
		s.leave()
		return nil, err
	}
	return func() { unlock(); s.leave() }, nil
}

// lockID waits until no other call works on id, then marks it busy. The
// returned func releases it.
func (s *Store) lockID(ctx context.Context, id string) (func(), error) {
	for {
		s.mu.Lock()
		ch, held := s.busy[id]
		if !held {
			ch = make(chan struct{})
			s.busy[id] = ch
			s.mu.Unlock()
			return func() { s.unlockID(id, ch) }, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("queue: waiting for op %q: %w", id, context.Cause(ctx))
		case <-s.done:
			return nil, ErrClosed
		}
	}
}

func (s *Store) unlockID(id string, ch chan struct{}) {
	s.mu.Lock()
	delete(s.busy, id)
	close(ch)
	s.changed.Notify() // a claim may have skipped this op while it was busy
	s.mu.Unlock()
}

// SetMaxBytes changes queue.max.bytes live; ops already accepted stay. It
// must be at least MaxPayloadBytes.
func (s *Store) SetMaxBytes(n int64) error {
	if n < MaxPayloadBytes {
		return fmt.Errorf("queue: SetMaxBytes(%d): queue.max.bytes must be at least %d (one op's largest payload)", n, MaxPayloadBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxBytes = n
	return nil
}

// SetLimits changes queue.max.ops and queue.retention live. Zero keeps the
// current value.
func (s *Store) SetLimits(maxOps int, retention time.Duration) error {
	if maxOps < 0 || retention < 0 {
		return fmt.Errorf("queue: SetLimits(%d, %v): limits must not be negative", maxOps, retention)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if maxOps > 0 {
		s.maxOps = maxOps
	}
	if retention > 0 {
		s.retention = retention
	}
	return nil
}

// Stats is a snapshot of the store for metrics.
type Stats struct {
	// ByState counts ops per state; done and dead_lettered count the
	// finished ops still retained.
	ByState map[State]int
	// Unfinished counts accepted, unfinished ops, the figure MaxOps bounds
	// (including submits being committed).
	Unfinished int
	// OldestUnfinished is the AcceptedAt of the oldest unfinished op, zero
	// if none.
	OldestUnfinished time.Time
	MaxOps           int
	Retention        time.Duration
	// PayloadBytes is the payload bytes the store keeps (unfinished and
	// dead_lettered ops), the figure MaxBytes bounds (including submits
	// being committed).
	PayloadBytes int64
	MaxBytes     int64
	// Kept counts the dead_lettered ops kept until replayed or discarded
	// because their dead letter went out without the payload (also
	// counted in ByState[DeadLettered]).
	Kept int
	// FileBytes is the size of the bbolt file (queue.db); 0 if unknown.
	FileBytes int64
	// OldestDLQPending is the AcceptedAt of the oldest op waiting to be
	// published to the dead-letter topic, zero if none.
	OldestDLQPending time.Time
}

// Stats returns counts per state and the oldest unfinished op's AcceptedAt.
// It costs O(unfinished ops).
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{ByState: map[State]int{}, MaxOps: s.maxOps, Retention: s.retention,
		PayloadBytes: s.bytes + s.pendBytes, MaxBytes: s.maxBytes, Kept: s.kept}
	for _, e := range s.sched.entries {
		st.ByState[e.state]++
		if st.OldestUnfinished.IsZero() || e.acceptedAt.Before(st.OldestUnfinished) {
			st.OldestUnfinished = e.acceptedAt
		}
		if e.state == DLQPending && (st.OldestDLQPending.IsZero() || e.acceptedAt.Before(st.OldestDLQPending)) {
			st.OldestDLQPending = e.acceptedAt
		}
	}
	for _, state := range []State{Done, DeadLettered} {
		st.ByState[state] = s.finished[state]
	}
	st.Unfinished = len(s.sched.entries) + s.pending
	if fi, err := os.Stat(s.path); err == nil {
		st.FileBytes = fi.Size()
	}
	return st
}

// Get returns the op with its payload, or ErrNotFound.
func (s *Store) Get(id string) (Op, error) {
	if err := s.enter(); err != nil {
		return Op{}, err
	}
	defer s.leave()
	var op Op
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		op, err = getOp(tx.Bucket(bOps), id)
		if err != nil {
			return err
		}
		op.Payload = append(json.RawMessage(nil), tx.Bucket(bPayloads).Get([]byte(id))...)
		return nil
	})
	return op, err
}

// --- storage helpers (inside a transaction) ---

func getOp(b *bolt.Bucket, id string) (Op, error) {
	v := b.Get([]byte(id))
	if v == nil {
		return Op{}, fmt.Errorf("queue: op %q: %w", id, ErrNotFound)
	}
	var op Op
	if err := json.Unmarshal(v, &op); err != nil {
		return Op{}, fmt.Errorf("queue: op %q: corrupt record: %w", id, err)
	}
	return op, nil
}

func putOp(b *bolt.Bucket, op Op) error {
	op.Payload = nil
	v, err := json.Marshal(op)
	if err != nil {
		return err
	}
	return b.Put([]byte(op.ID), v)
}

// objKey orders by object, then seq. Objects contain no control characters,
// so the 0 separator keeps "a" before "a b".
func objKey(object string, seq uint64) []byte {
	k := make([]byte, 0, len(object)+9)
	k = append(k, object...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func finKey(at time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(at.UnixMilli()))
	return append(k, id...)
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// addPayloadBytes adds delta to the stored payload-byte count (meta
// kPayloadBytes) in the transaction that adds or deletes the payloads.
func addPayloadBytes(tx *bolt.Tx, delta int64) error {
	if delta == 0 {
		return nil
	}
	meta := tx.Bucket(bMeta)
	var n int64
	if v := meta.Get(kPayloadBytes); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n < 0 {
		return fmt.Errorf("queue: payload byte count would be %d: the store is inconsistent", n)
	}
	return meta.Put(kPayloadBytes, be64(uint64(n)))
}

// readSeq returns the last seq handed out for object (0 if none).
func readSeq(tx *bolt.Tx, object string) uint64 {
	v := tx.Bucket(bSeqs).Get([]byte(object))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// writeSeq records seq as the object's last seq if it is higher.
func writeSeq(tx *bolt.Tx, object string, seq uint64) error {
	if readSeq(tx, object) >= seq {
		return nil
	}
	return tx.Bucket(bSeqs).Put([]byte(object), be64(seq))
}
