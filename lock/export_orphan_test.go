package lock

import (
	"context"
	"encoding/json"
	"path"

	"github.com/go-zookeeper/zk"
)

// PlantOrphan makes, through the engine's own session, what a bug in the
// engine would leave behind: a privateLock created as a grant creates it, or
// (child true) a foreground child, carrying a request id that no acquire or
// grant owns. It returns the node's name.
func PlantOrphan(ctx context.Context, e *Engine, object string, child bool) (string, error) {
	name, err := EscapeObject(object)
	if err != nil {
		return "", err
	}
	s, err := e.connectedSession(ctx)
	if err != nil {
		return "", err
	}
	objPath := e.root + "/" + name
	if _, err := e.ensureObject(ctx, s, objPath); err != nil {
		return "", err
	}
	data, _ := json.Marshal(nodeData{V: 1, Req: "planted-" + newRequestID(), Sidecar: e.opts.NodeID, Type: "foreground"})
	// The session audits only objects it has touched: an acquire would have.
	if err := s.own.enter(ctx, objPath, "planting"); err != nil {
		return "", err
	}
	defer s.own.leave(objPath, "planting")
	if child {
		p, err := s.conn.Create(objPath+"/A-", data, zk.FlagEphemeralSequential, e.acl)
		return path.Base(p), err
	}
	pl := objPath + "/" + privateLock
	_, err = s.conn.Multi(
		&zk.CreateRequest{Path: pl, Data: data, Acl: e.acl, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: pl, Data: data, Version: 0},
		&zk.SetDataRequest{Path: objPath, Data: nil, Version: -1},
	)
	return privateLock, err
}
