package lock

import (
	"context"
	"errors"
)

// nativeGrant is a grant's state under the native protocol.
type nativeGrant struct{}

func (e *Engine) acquireNative(ctx context.Context, r *request, shared bool) (*Grant, error) {
	return nil, errors.New("lock: native protocol: not built yet")
}
