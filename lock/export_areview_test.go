package lock

import (
	"context"
	"encoding/json"
	"path"

	"github.com/go-zookeeper/zk"
)

// ReviewAuditNames reports the sizes of the current session's records of
// its plugin children (owners.names, owners.byReq) and its live request ids.
func ReviewAuditNames(e *Engine) (names, byReq, live int) {
	s, err := e.current()
	if err != nil || s == nil {
		return -1, -1, -1
	}
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	return len(s.own.names), len(s.own.byReq), len(s.own.live)
}

// ReviewAuditLeftBehind does, through the engine's session, what a plugin
// request with id reqID does: it makes the id live on the object, creates a
// foreground child carrying the id and records its name (owners.name). end
// ends the request without deleting the child: what a lost delete or a bug
// leaves behind.
func ReviewAuditLeftBehind(ctx context.Context, e *Engine, object, reqID string) (node string, end func(), err error) {
	name, err := EscapeObject(object)
	if err != nil {
		return "", nil, err
	}
	s, err := e.connectedSession(ctx)
	if err != nil {
		return "", nil, err
	}
	objPath := e.root + "/" + name
	if _, err := e.ensureObject(ctx, s, objPath); err != nil {
		return "", nil, err
	}
	if err := s.own.enter(ctx, objPath, reqID); err != nil {
		return "", nil, err
	}
	end = func() { s.own.leave(objPath, reqID) }
	data, _ := json.Marshal(nodeData{V: 1, Req: reqID, Sidecar: e.opts.NodeID, Type: "foreground"})
	p, err := s.conn.Create(objPath+"/A-", data, zk.FlagEphemeralSequential, e.acl)
	if err != nil {
		end()
		return "", nil, err
	}
	node = path.Base(p)
	_, st, err := s.conn.Exists(objPath)
	if err != nil {
		end()
		return "", nil, err
	}
	s.own.name(objPath, node, reqID, st.Czxid)
	return node, end, nil
}
