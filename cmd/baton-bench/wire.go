package main

// wireCapture records ZooKeeper's packets on the loopback interface with
// the kernel's receive timestamps (CLOCK_REALTIME, the clock of
// time.Now().UnixNano() in every process), for floor's handoff breakdown:
// when the release's write left, when its answer and the watch event came
// back, when the successor read. It reads an AF_PACKET socket (needs
// CAP_NET_RAW) and parses only the first 16 bytes of each ZooKeeper frame.

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// zkPkt is one ZooKeeper frame seen on the wire.
type zkPkt struct {
	ts   int64 // kernel receive time, ns since the epoch
	conn int   // the client's TCP port (one per ZooKeeper session)
	req  bool  // client → server
	xid  int32 // -1: watch event, -2: ping
	op   int32 // request: opcode; answer: error code; event: event type
}

type wireCapture struct {
	fd   int
	port int
	mu   sync.Mutex
	pkts []zkPkt
	done chan struct{}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// startCapture records every ZooKeeper frame to or from zkPort on lo.
func startCapture(zkPort int) (*wireCapture, error) {
	ifi, err := net.InterfaceByName("lo")
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(syscall.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("capture: AF_PACKET socket (needs CAP_NET_RAW; or run with --capture=false): %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			syscall.Close(fd)
		}
	}()
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return nil, fmt.Errorf("capture: bind lo: %w", err)
	}
	// in the kernel, keep only IPv4 TCP to or from zkPort (the machine's other
	// loopback traffic would cost this process a wake-up per packet)
	//lint:ignore SA1019 a classic BPF program on a raw socket: x/net/bpf would only assemble the same
	if err := syscall.AttachLsf(fd, portFilter(zkPort)); err != nil {
		return nil, fmt.Errorf("capture: filter: %w", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1); err != nil {
		return nil, fmt.Errorf("capture: SO_TIMESTAMPNS: %w", err)
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	tv := syscall.Timeval{Usec: 100_000} // the loop looks at done this often
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("capture: SO_RCVTIMEO: %w", err)
	}
	ok = true
	c := &wireCapture{fd: fd, port: zkPort, done: make(chan struct{})}
	go c.loop()
	return c, nil
}

func (c *wireCapture) loop() {
	buf := make([]byte, 70000)
	oob := make([]byte, 128)
	for {
		select {
		case <-c.done:
			syscall.Close(c.fd)
			return
		default:
		}
		n, oobn, _, from, err := syscall.Recvmsg(c.fd, buf, oob, 0)
		if err != nil {
			continue // EAGAIN at the timeout, EINTR
		}
		if ll, ok := from.(*syscall.SockaddrLinklayer); !ok || ll.Pkttype == syscall.PACKET_OUTGOING {
			continue // on lo every packet is seen leaving and arriving: keep the arrival
		}
		ts := time.Now().UnixNano()
		if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
					sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
					nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
					ts = sec*1e9 + nsec
				}
			}
		}
		c.parse(ts, buf[:n])
	}
}

// parse takes an Ethernet frame (lo's are Ethernet-framed on AF_PACKET)
// carrying IPv4/TCP and records the ZooKeeper frames that start in it.
func (c *wireCapture) parse(ts int64, b []byte) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:14]) != 0x0800 {
		return
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ip[9] != 6 || ihl < 20 || total > len(ip) || total < ihl+20 {
		return
	}
	tcp := ip[ihl:total]
	sport, dport := int(binary.BigEndian.Uint16(tcp[0:2])), int(binary.BigEndian.Uint16(tcp[2:4]))
	doff := int(tcp[12]>>4) * 4
	if doff > len(tcp) || (sport != c.port && dport != c.port) {
		return
	}
	p := tcp[doff:]
	req := dport == c.port
	conn := sport
	if !req {
		conn = dport
	}
	var got []zkPkt
	for len(p) >= 12 {
		n := int(int32(binary.BigEndian.Uint32(p[0:4])))
		body := p[4:]
		if n < 8 {
			break
		}
		k := zkPkt{ts: ts, conn: conn, req: req, xid: int32(binary.BigEndian.Uint32(body[0:4]))}
		switch {
		case req:
			k.op = int32(binary.BigEndian.Uint32(body[4:8]))
		case len(body) >= 16 && k.xid == -1 && len(body) >= 20:
			k.op = int32(binary.BigEndian.Uint32(body[16:20])) // event type
		case len(body) >= 16:
			k.op = int32(binary.BigEndian.Uint32(body[12:16])) // error code
		}
		got = append(got, k)
		if n > len(body) {
			break // the rest of this frame is in the next segment
		}
		p = body[n:]
	}
	if len(got) > 0 {
		c.mu.Lock()
		c.pkts = append(c.pkts, got...)
		c.mu.Unlock()
	}
}

// portFilter is the classic BPF program of "ip and tcp port P" on an
// Ethernet frame (what tcpdump -dd prints for it, unfragmented packets).
func portFilter(port int) []syscall.SockFilter {
	p := uint32(port)
	bpf := func(code uint16, jt, jf uint8, k uint32) syscall.SockFilter {
		return syscall.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	return []syscall.SockFilter{
		bpf(0x28, 0, 0, 12),         // ldh [12]: ethertype
		bpf(0x15, 0, 8, 0x0800),     // IPv4, else drop
		bpf(0x30, 0, 0, 23),         // ldb [23]: protocol
		bpf(0x15, 0, 6, 6),          // TCP, else drop
		bpf(0xb1, 0, 0, 14),         // ldxb 4*([14]&0xf): IP header length
		bpf(0x48, 0, 0, 14),         // ldh [x+14]: source port
		bpf(0x15, 2, 0, p),          // zkPort: keep
		bpf(0x48, 0, 0, 16),         // ldh [x+16]: destination port
		bpf(0x15, 0, 1, p),          // zkPort: keep, else drop
		bpf(0x06, 0, 0, 0x00040000), // keep (up to 256 KiB)
		bpf(0x06, 0, 0, 0),          // drop
	}
}

// take returns what was recorded since the last take.
func (c *wireCapture) take() []zkPkt {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pkts
	c.pkts = nil
	return p
}

func (c *wireCapture) stop() { close(c.done) }

// zkOpName names a request's opcode.
func zkOpName(op int32) string {
	switch op {
	case 1:
		return "create"
	case 2:
		return "delete"
	case 3:
		return "exists"
	case 4:
		return "getData"
	case 5:
		return "setData"
	case 8:
		return "getChildren"
	case 9:
		return "sync"
	case 11:
		return "ping"
	case 12:
		return "getChildren2"
	case 13:
		return "check"
	case 14:
		return "multi"
	case 15:
		return "create2"
	case 101:
		return "setWatches"
	}
	return fmt.Sprintf("op%d", op)
}
