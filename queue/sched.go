package queue

import (
	"container/heap"
	"slices"
	"time"
)

// pendingState marks a scheduler entry whose op is being accepted (seq
// assigned, commit in progress): it blocks its object's later ops and cannot
// be claimed.
const pendingState State = ""

// entry is the scheduling view of an unfinished op (payloads stay on disk).
type entry struct {
	id, object string
	seq        uint64
	state      State
	acceptedAt time.Time
	readyAt    time.Time // NextAttemptAt while retrying
}

// objQueue holds one object's blocking entries (pending, queued, running,
// retrying) in seq order. Only its head can run.
type objQueue struct {
	object  string
	lastSeq uint64   // last seq handed out for this object
	fifo    []*entry // seq order
	idx     int      // index in the ready heap, -1 if absent
	keyAt   time.Time
	keyAcc  time.Time
}

// scheduler is guarded by Store.mu.
type scheduler struct {
	entries map[string]*entry    // committed unfinished ops by id
	objects map[string]*objQueue // objects with blocking entries
	ready   readyHeap            // objects whose head is queued or retrying
	dlq     map[string][]*entry  // dlq_pending entries per object, in seq order
	ndlq    int                  // dlq_pending entries
}

func (sc *scheduler) init() {
	sc.entries = map[string]*entry{}
	sc.objects = map[string]*objQueue{}
	sc.dlq = map[string][]*entry{}
}

// addDLQ records e as dlq_pending (O(1) when it is its object's highest seq,
// the usual case).
func (sc *scheduler) addDLQ(e *entry) {
	l := sc.dlq[e.object]
	i := len(l)
	for i > 0 && l[i-1].seq > e.seq {
		i--
	}
	sc.dlq[e.object] = slices.Insert(l, i, e)
	sc.ndlq++
}

// removeDLQ forgets e as dlq_pending (O(1) when it is its object's lowest
// seq, the usual case: letters are published in seq order).
func (sc *scheduler) removeDLQ(e *entry) {
	l := sc.dlq[e.object]
	i := slices.Index(l, e)
	if i < 0 {
		return
	}
	sc.ndlq--
	switch {
	case len(l) == 1:
		delete(sc.dlq, e.object)
	case i == 0:
		l[0] = nil
		sc.dlq[e.object] = l[1:]
	default:
		sc.dlq[e.object] = slices.Delete(l, i, i+1)
	}
}

// queue returns the object's queue, creating it with lastSeq from loadSeq.
func (sc *scheduler) queue(object string, loadSeq func() (uint64, error)) (*objQueue, error) {
	if q := sc.objects[object]; q != nil {
		return q, nil
	}
	last, err := loadSeq()
	if err != nil {
		return nil, err
	}
	q := &objQueue{object: object, lastSeq: last, idx: -1}
	sc.objects[object] = q
	return q, nil
}

// load adds an op read at Open (in object, seq order).
func (sc *scheduler) load(op Op, lastSeq uint64) {
	e := &entry{id: op.ID, object: op.Object, seq: op.Seq, state: op.State, acceptedAt: op.AcceptedAt, readyAt: op.NextAttemptAt}
	sc.entries[op.ID] = e
	if op.State == DLQPending {
		sc.addDLQ(e)
	}
	if !op.State.blocks() {
		return
	}
	q, _ := sc.queue(op.Object, func() (uint64, error) { return lastSeq, nil })
	q.fifo = append(q.fifo, e)
	sc.reschedule(q)
}

// reschedule puts q in the ready heap iff its head can be claimed (at its
// key time), and forgets q when it is empty. One timeline orders the heads:
// a retrying head at its NextAttemptAt, a queued head at its AcceptedAt, so
// a retry that has been due for a while goes before ops accepted after it
// became due.
func (sc *scheduler) reschedule(q *objQueue) {
	if len(q.fifo) == 0 {
		if q.idx >= 0 {
			heap.Remove(&sc.ready, q.idx)
		}
		delete(sc.objects, q.object)
		return
	}
	h := q.fifo[0]
	if h.state != Queued && h.state != Retrying {
		if q.idx >= 0 {
			heap.Remove(&sc.ready, q.idx)
		}
		return
	}
	q.keyAt, q.keyAcc = h.acceptedAt, h.acceptedAt
	if h.state == Retrying {
		q.keyAt = h.readyAt
	}
	if q.idx >= 0 {
		heap.Fix(&sc.ready, q.idx)
	} else {
		heap.Push(&sc.ready, q)
	}
}

// remove takes e out of its object's fifo and reschedules the object.
func (sc *scheduler) remove(e *entry) {
	q := sc.objects[e.object]
	if q == nil {
		return
	}
	switch i := slices.Index(q.fifo, e); {
	case i == 0: // the usual case (the head finished): O(1), no shift
		q.fifo[0] = nil
		q.fifo = q.fifo[1:]
	case i > 0:
		q.fifo = slices.Delete(q.fifo, i, i+1)
	}
	sc.reschedule(q)
}

// readyHeap orders objects by when their head may run (NextAttemptAt for
// retrying, AcceptedAt for queued), then by the head's AcceptedAt, then by
// object name.
type readyHeap []*objQueue

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.keyAt.Equal(b.keyAt) {
		return a.keyAt.Before(b.keyAt)
	}
	if !a.keyAcc.Equal(b.keyAcc) {
		return a.keyAcc.Before(b.keyAcc)
	}
	return a.object < b.object
}
func (h readyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *readyHeap) Push(x any) {
	q := x.(*objQueue)
	q.idx = len(*h)
	*h = append(*h, q)
}
func (h *readyHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.idx = -1
	return q
}
