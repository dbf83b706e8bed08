// Command standin provides the stand-ins of `make deploy-test`
// (deploy/test/run.sh), where no image registry is reachable:
//
//	standin kafka --listen 127.0.0.1:PORT --topic T   a Kafka-protocol broker (franz-go's kfake, in memory)
//	standin app --listen 127.0.0.1:PORT                an app that records Baton's deliveries
//	standin ports N                                    prints N free loopback TCP ports
//
// The app answers 400 (permanent: dead-lettered) to the ops of object
// "dead" and 200 to the others, logs one line per delivery, and lists what
// it received at GET /deliveries. It is not for production.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: standin kafka|app --listen HOST:PORT [--topic T] | standin ports N")
		os.Exit(64)
	}
	if os.Args[1] == "ports" && len(os.Args) == 3 {
		if err := freePorts(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			os.Exit(1)
		}
		return
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:9092", "`HOST:PORT` to listen on")
	topic := fs.String("topic", "MdmDeadLetterQueue", "topic the broker creates at start")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "kafka":
		err = runKafka(ctx, *listen, *topic)
	case "app":
		err = runApp(ctx, *listen)
	default:
		err = fmt.Errorf("unknown stand-in %q: kafka or app", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}

func runKafka(ctx context.Context, listen, topic string) error {
	_, p, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return fmt.Errorf("port %q: %w", p, err)
	}
	c, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(1, topic))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("standin kafka: broker on %v, topic %s\n", c.ListenAddrs(), topic)
	<-ctx.Done()
	return nil
}

// delivery is what the app records of one delivery.
type delivery struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Attempt int             `json:"attempt"`
	Token   string          `json:"token"`
	Payload json.RawMessage `json:"payload"`
	Status  int             `json:"status"`
}

func runApp(ctx context.Context, listen string) error {
	var (
		mu  sync.Mutex
		got []delivery
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /deliver", func(w http.ResponseWriter, r *http.Request) {
		var d delivery
		if err := json.NewDecoder(io.LimitReader(r.Body, 2<<20)).Decode(&d); err != nil {
			http.Error(w, "not a delivery: "+err.Error(), http.StatusBadRequest)
			return
		}
		d.Status = http.StatusOK
		if d.Object == "dead" {
			d.Status = http.StatusBadRequest
		}
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		fmt.Printf("standin app: delivery op=%s object=%s token=%s attempt=%d -> %d\n", d.ID, d.Object, d.Token, d.Attempt, d.Status)
		if d.Status != http.StatusOK {
			http.Error(w, "standin app: object dead is refused", d.Status)
			return
		}
		w.WriteHeader(d.Status)
	})
	mux.HandleFunc("GET /deliveries", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(got)
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Printf("standin app: listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// freePorts prints n distinct free loopback ports, space separated. They are
// free when printed; the stack binds them moments later.
func freePorts(arg string) error {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 {
		return fmt.Errorf("ports: %q is not a positive count", arg)
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		if len(lns) > 1 {
			fmt.Print(" ")
		}
		fmt.Print(ln.Addr().(*net.TCPAddr).Port)
	}
	fmt.Println()
	return nil
}
