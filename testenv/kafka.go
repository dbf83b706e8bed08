package testenv

import (
	"fmt"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultTopic is the topic StartKafka creates when KafkaOptions.Topics is empty.
const DefaultTopic = "MdmDeadLetterQueue"

// KafkaOptions configures StartKafka. A zero field means its documented default.
type KafkaOptions struct {
	Topics     []string // topics created at start; default [DefaultTopic]
	Partitions int      // partitions of each topic; default 1
	AutoCreate bool     // let clients create missing topics (the client must ask for it too)

	// Proxy puts a fault [Proxy] in front of the broker and makes the broker
	// advertise the proxy's address in its metadata, so that every
	// connection a client makes, including those after bootstrap, goes
	// through the proxy. Addr then returns the proxy's address; Proxy()
	// returns the proxy.
	Proxy bool
}

// Kafka is one in-process Kafka-protocol broker (franz-go's kfake) on a
// reserved loopback port. It keeps everything in memory: to simulate an
// outage, start it with KafkaOptions.Proxy and black-hole or reset the proxy
// while the broker stays up. Methods are safe for concurrent use.
type Kafka struct {
	c      *kfake.Cluster
	lease  *PortLease
	proxy  *Proxy
	addr   string
	once   sync.Once
	broker string
}

// advertisedListener is the broker's real listener reporting another address
// as its own: kfake advertises its listener's Addr() in metadata and
// find-coordinator answers, so this makes it advertise the proxy.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// StartKafka starts the broker (and its proxy with KafkaOptions.Proxy).
// Call Stop when done.
func StartKafka(opts KafkaOptions) (*Kafka, error) {
	if len(opts.Topics) == 0 {
		opts.Topics = []string{DefaultTopic}
	}
	if opts.Partitions == 0 {
		opts.Partitions = 1
	}
	if opts.Partitions < 0 {
		return nil, fmt.Errorf("testenv: KafkaOptions.Partitions = %d, want >= 1", opts.Partitions)
	}
	lease, held, err := reserveListener()
	if err != nil {
		return nil, err
	}
	k := &Kafka{lease: lease, broker: lease.Addr()}
	k.addr = k.broker
	// The broker gets the listener bound at the reservation: a port checked
	// free and bound again later can be taken in between (CI saw
	// "address already in use" that way). Later listens, if kfake makes any,
	// bind normally.
	var advertised net.Addr
	var first sync.Once
	listen := func(network, address string) (net.Listener, error) {
		var ln net.Listener
		first.Do(func() { ln, held = held, nil })
		if ln == nil {
			var err error
			if ln, err = net.Listen(network, address); err != nil {
				return nil, err
			}
		}
		if advertised != nil {
			return advertisedListener{Listener: ln, addr: advertised}, nil
		}
		return ln, nil
	}
	kopts := []kfake.Opt{
		kfake.Ports(k.lease.Port()),
		kfake.ListenFn(listen),
		kfake.DefaultNumPartitions(opts.Partitions),
		kfake.SeedTopics(int32(opts.Partitions), opts.Topics...),
	}
	if opts.AutoCreate {
		kopts = append(kopts, kfake.AllowAutoTopicCreation())
	}
	if opts.Proxy {
		if k.proxy, err = StartProxy(k.broker); err != nil {
			held.Close()
			k.lease.Release()
			return nil, err
		}
		k.addr = k.proxy.Addr()
		padv, err := net.ResolveTCPAddr("tcp", k.addr)
		if err != nil {
			k.proxy.Close()
			held.Close()
			k.lease.Release()
			return nil, fmt.Errorf("testenv: kafka proxy address: %w", err)
		}
		advertised = padv
	}
	if k.c, err = kfake.NewCluster(kopts...); err != nil {
		if k.proxy != nil {
			k.proxy.Close()
		}
		if held != nil {
			held.Close()
		}
		k.lease.Release()
		return nil, fmt.Errorf("testenv: start kafka on %s: %w", k.broker, err)
	}
	return k, nil
}

// KafkaT starts Kafka for a test: t.Fatalf on error, Stop in t.Cleanup.
func KafkaT(t TB, opts KafkaOptions) *Kafka {
	t.Helper()
	k, err := StartKafka(opts)
	if err != nil {
		t.Fatalf("testenv: start kafka: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Fatalf("testenv: stop kafka: %v", err)
		}
	})
	return k
}

// Addr returns the bootstrap address to give clients, "127.0.0.1:port": the
// proxy's with KafkaOptions.Proxy, else the broker's.
func (k *Kafka) Addr() string { return k.addr }

// BrokerAddr returns the broker's own listen address. With
// KafkaOptions.Proxy a client bootstrapping here still goes through the proxy
// after its first metadata request.
func (k *Kafka) BrokerAddr() string { return k.broker }

// Proxy returns the proxy in front of the broker, or nil without KafkaOptions.Proxy.
func (k *Kafka) Proxy() *Proxy { return k.proxy }

// Cluster returns the underlying kfake cluster (for kfake's own fault hooks).
func (k *Kafka) Cluster() *kfake.Cluster { return k.c }

// Stop closes the proxy (if any) and the broker and releases the port. It is idempotent.
func (k *Kafka) Stop() error {
	k.once.Do(func() {
		if k.proxy != nil {
			k.proxy.Close()
		}
		k.c.Close()
		k.lease.Release()
	})
	return nil
}
