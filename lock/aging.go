package lock

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"
)

// childInfo is what the aging order needs of one child: its creation time
// (ZooKeeper's ctime, ms, stamped by the leader) and the aging bound its
// creator recorded (ms; 0: the node does not age).
type childInfo struct {
	ctime, ageMs int64
}

// childGetter returns a child's info; ok false: the child is gone.
type childGetter func(name string) (ci childInfo, ok bool, err error)

type seqNode struct {
	name string
	seq  int64
	t    int64 // ageable background nodes: ctime + age, when it ages
}

// ageOrder puts queue (children but privateLock, in name order) in grant
// order with aging (see "Aging" in the package doc) and reports the
// background nodes placed before at least one foreground node. Children
// found gone meanwhile are left out. Without ageable background nodes, or
// with names of other prefixes, the order is the name order and no child is
// read.
func ageOrder(queue []string, fgPrefix, bgPrefix string, get childGetter) ([]string, map[string]bool, error) {
	var fg, bg []seqNode
	for _, n := range queue {
		seq, ok := seqOf(n)
		switch {
		case !ok:
			return queue, nil, nil
		case strings.HasPrefix(n, fgPrefix+"-") && len(n) == len(fgPrefix)+11:
			fg = append(fg, seqNode{name: n, seq: seq})
		case strings.HasPrefix(n, bgPrefix+"-") && len(n) == len(bgPrefix)+11:
			bg = append(bg, seqNode{name: n, seq: seq})
		default:
			return queue, nil, nil
		}
	}
	// A lone background node with no foreground node created after it
	// cannot move: nothing to read.
	if len(bg) == 0 || len(bg) == 1 && (len(fg) == 0 || fg[len(fg)-1].seq < bg[0].seq) {
		return queue, nil, nil
	}
	gone := map[string]bool{}
	var ageable, plain []seqNode
	for _, b := range bg {
		ci, ok, err := get(b.name)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case !ok:
			gone[b.name] = true
		case ci.ageMs > 0:
			b.t = ci.ctime + ci.ageMs
			ageable = append(ageable, b)
		default:
			plain = append(plain, b)
		}
	}
	// Ageable nodes in the order they age (then by sequence): with one
	// bound for all, that is their sequence order.
	sort.SliceStable(ageable, func(i, j int) bool {
		if ageable[i].t != ageable[j].t {
			return ageable[i].t < ageable[j].t
		}
		return ageable[i].seq < ageable[j].seq
	})
	// pos[k]: index in fg of the first foreground node created after
	// ageable[k] (higher sequence) and after it aged (ctime > t). Starting
	// each scan where the previous one stopped keeps the positions in
	// order; with ZooKeeper's ctimes growing with the sequence it changes
	// nothing.
	pos := make([]int, len(ageable))
	prev := 0
	for k, b := range ageable {
		p := len(fg)
		for j := prev; j < len(fg); j++ {
			a := fg[j]
			if a.seq <= b.seq || gone[a.name] {
				continue
			}
			ci, ok, err := get(a.name)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				gone[a.name] = true
				continue
			}
			if ci.ctime > b.t {
				p = j
				break
			}
		}
		pos[k], prev = p, p
	}
	out := make([]string, 0, len(queue))
	aged := map[string]bool{}
	k := 0
	for j, a := range fg {
		for ; k < len(ageable) && pos[k] == j; k++ {
			out = append(out, ageable[k].name)
			aged[ageable[k].name] = true
		}
		if !gone[a.name] {
			out = append(out, a.name)
		}
	}
	for ; k < len(ageable); k++ {
		out = append(out, ageable[k].name)
	}
	for _, b := range plain {
		out = append(out, b.name)
	}
	return out, aged, nil
}

// readChildInfo reads one child for ageOrder.
func readChildInfo(s *session, p string) (childInfo, bool, error) {
	data, st, err := s.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return childInfo{}, false, nil
	}
	if err != nil {
		return childInfo{}, false, err
	}
	return infoOf(data, st), true, nil
}

func infoOf(data []byte, st *zk.Stat) childInfo {
	ci := childInfo{ctime: st.Ctime}
	var d nodeData
	if json.Unmarshal(data, &d) == nil && d.V == 1 && d.Req != "" && d.AgeMs > 0 {
		ci.ageMs = d.AgeMs
	}
	return ci
}

// ordered lists, for listShared, the queue in grant order; child info is
// cached per object node incarnation (names repeat only in a new one).
func (e *Engine) ordered(s *session, name, objPath string, czxid int64, queue []string) ([]string, error) {
	get := func(child string) (childInfo, bool, error) {
		e.objMu.Lock()
		st := e.objs[name]
		if st != nil && st.infoCzxid == czxid {
			if ci, ok := st.info[child]; ok {
				e.objMu.Unlock()
				return ci, true, nil
			}
		}
		e.objMu.Unlock()
		ci, ok, err := readChildInfo(s, objPath+"/"+child)
		if err != nil || !ok {
			return ci, ok, err
		}
		e.objMu.Lock()
		if st := e.objs[name]; st != nil {
			if st.infoCzxid != czxid || st.info == nil {
				st.info, st.infoCzxid = map[string]childInfo{}, czxid
			}
			st.info[child] = ci
		}
		e.objMu.Unlock()
		return ci, true, nil
	}
	q, _, err := ageOrder(queue, e.opts.ForegroundPrefix, e.opts.BackgroundPrefix, get)
	// Keep only the children still queued: under steady traffic the cache
	// would otherwise grow by every node that ever waited.
	e.objMu.Lock()
	if st := e.objs[name]; st != nil && st.infoCzxid == czxid && len(st.info) > len(queue) {
		live := make(map[string]bool, len(queue))
		for _, c := range queue {
			live[c] = true
		}
		for c := range st.info {
			if !live[c] {
				delete(st.info, c)
			}
		}
	}
	e.objMu.Unlock()
	return q, err
}
