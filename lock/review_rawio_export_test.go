package lock

import (
	"net"
	"sync"
	"time"
)

// ReviewRawioAck is one response the tracker matched to its request: the
// request's send time (what the session counts validity from), the time the
// answer was read, and whether it went through the leader.
type ReviewRawioAck struct {
	Sent, At time.Time
	Leader   bool
}

// ReviewRawioSink records what a tracked connection reports.
type ReviewRawioSink struct {
	mu         sync.Mutex
	acks       []ReviewRawioAck
	handshakes int
}

func (s *ReviewRawioSink) handshake(int64, time.Duration, time.Time) {
	s.mu.Lock()
	s.handshakes++
	s.mu.Unlock()
}

func (s *ReviewRawioSink) setWatchesSent() {}

func (s *ReviewRawioSink) acked(sent, at time.Time, leader bool) {
	s.mu.Lock()
	s.acks = append(s.acks, ReviewRawioAck{sent, at, leader})
	s.mu.Unlock()
}

// Acks returns the responses matched so far, in the order read, and the
// number of handshakes.
func (s *ReviewRawioSink) Acks() ([]ReviewRawioAck, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ReviewRawioAck(nil), s.acks...), s.handshakes
}

// ReviewRawioTrack wraps c as the engine's session dialer does
// (newTrackedConn) with a recording sink; raw says whether its reads and
// writes are the raw system calls.
func ReviewRawioTrack(c net.Conn) (tc net.Conn, sink *ReviewRawioSink, raw bool) {
	sink = &ReviewRawioSink{}
	t := newTrackedConn(c, sink)
	return t, sink, t.io.Raw()
}
