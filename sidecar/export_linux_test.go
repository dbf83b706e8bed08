package sidecar

// WatcherEvents is how many events of detached connections the close
// watcher has handled (detach_linux.go).
func WatcherEvents(s *Server) int64 { return s.closes.events.Load() }
