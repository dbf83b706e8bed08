package sidecar

import "net/http"

// WrapHandler wraps, before Run, the handler Run serves (the lean path's
// and net/http's).
func WrapHandler(s *Server, wrap func(http.Handler) http.Handler) { s.handler = wrap(s.handler) }
