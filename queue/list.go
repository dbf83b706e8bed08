package queue

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Paging of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListOptions selects the ops List returns. Zero fields select everything.
type ListOptions struct {
	State  State  // only ops in this state
	Object string // only ops of this object
	// Limit is the page size: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
	// After is the cursor: the Next of the previous page (an op id); the
	// page starts after it.
	After string
}

// List returns a page of ops (without payloads) in id order — generated
// ids are UUIDv7, so time order for them — and the cursor of the next page
// ("" when this is the last). Invalid options are a *FieldError naming
// "state", "limit", "after" or "object". The cost is a scan of the op
// records from After until the page is full (all of them for a selective
// filter), in one read transaction.
func (s *Store) List(opts ListOptions) ([]Op, string, error) {
	if opts.State != "" && !validState(opts.State) {
		return nil, "", &FieldError{"state", fmt.Sprintf("%q is not one of queued, running, retrying, done, dlq_pending, dead_lettered", opts.State)}
	}
	if opts.Limit < 0 || opts.Limit > MaxListLimit {
		return nil, "", &FieldError{"limit", fmt.Sprintf("%d is not 1..%d", opts.Limit, MaxListLimit)}
	}
	if opts.Limit == 0 {
		opts.Limit = DefaultListLimit
	}
	if opts.After != "" && !ValidID(opts.After) {
		return nil, "", &FieldError{"after", "is not an op id (the next of a previous page)"}
	}
	if opts.Object != "" {
		if err := ValidObject(opts.Object); err != nil {
			return nil, "", err
		}
	}
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.leave()
	var (
		out  []Op
		next string
	)
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bOps).Cursor()
		k, v := c.First()
		if opts.After != "" {
			k, v = c.Seek([]byte(opts.After))
			if k != nil && bytes.Equal(k, []byte(opts.After)) {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			var op Op
			if err := json.Unmarshal(v, &op); err != nil {
				return fmt.Errorf("queue: op %q: corrupt record: %w", k, err)
			}
			if opts.State != "" && op.State != opts.State || opts.Object != "" && op.Object != opts.Object {
				continue
			}
			if len(out) == opts.Limit {
				next = out[len(out)-1].ID
				return nil
			}
			out = append(out, op)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

func validState(st State) bool {
	for _, s := range States {
		if s == st {
			return true
		}
	}
	return false
}
