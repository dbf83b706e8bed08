package main

// wire runs a command while it records ZooKeeper's packets on the loopback
// and prints what the command's sessions asked for: requests per opcode,
// answers per error code, watch events (event<type>) and pings, in all
// and per connection (by the client's port). It is how a workload's
// ZooKeeper work per operation is counted (needs CAP_NET_RAW):
//
//	baton-bench wire --zk-port 24301 -- bin/baton-bench W3 --zk 127.0.0.1:24301 ...

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

func wireMain(args []string) int {
	fs := flag.NewFlagSet("baton-bench wire", flag.ExitOnError)
	port := fs.Int("zk-port", 2181, "ZooKeeper's client port on the loopback")
	dump := fs.Int("dump", 0, "also print the last N packets in order (time µs, client port, direction, opcode or error or event)")
	_ = fs.Parse(args)
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: baton-bench wire --zk-port P -- COMMAND [ARGS...]")
		return 64
	}
	c, err := startCapture(*port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	runErr := cmd.Run()
	time.Sleep(200 * time.Millisecond) // the last frames' delivery to the capture
	c.stop()
	pkts := c.take()
	if *dump > 0 {
		for _, p := range pkts[max(len(pkts)-*dump, 0):] {
			dir, what := "<-", fmt.Sprintf("err%d", p.op)
			switch {
			case p.req && p.xid == -2:
				dir, what = "->", "ping"
			case p.req:
				dir, what = "->", zkOpName(p.op)
			case p.xid == -1:
				what = fmt.Sprintf("event%d", p.op)
			}
			fmt.Printf("%d %d %s %s xid=%d\n", (p.ts-pkts[0].ts)/1000, p.conn, dir, what, p.xid)
		}
	}
	b, _ := json.Marshal(countWire(pkts))
	fmt.Println(string(b))
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "wire:", runErr)
		return 1
	}
	return 0
}

// wireCount is what wire prints.
type wireCount struct {
	Probe         string                    `json:"probe"`
	Requests      map[string]int            `json:"requests"` // per opcode, pings included
	RequestsTotal int                       `json:"requests_total"`
	ErrorAnswers  map[string]int            `json:"error_answers"` // per error code (answers other than 0)
	Events        map[string]int            `json:"events"`        // watch events, event<type>
	Connections   map[string]map[string]int `json:"connections"`   // per client port: requests and events
}

// countWire counts the captured packets per opcode, error, event and
// connection.
func countWire(pkts []zkPkt) wireCount {
	w := wireCount{Probe: "wire", Requests: map[string]int{}, ErrorAnswers: map[string]int{},
		Events: map[string]int{}, Connections: map[string]map[string]int{}}
	for _, p := range pkts {
		port := strconv.Itoa(p.conn)
		c := w.Connections[port]
		if c == nil {
			c = map[string]int{}
			w.Connections[port] = c
		}
		switch {
		case p.req:
			name := "ping"
			if p.xid != -2 {
				name = zkOpName(p.op)
			}
			w.Requests[name]++
			c[name]++
			w.RequestsTotal++
		case p.xid == -1:
			name := fmt.Sprintf("event%d", p.op)
			w.Events[name]++
			c[name]++
		case p.xid != -2 && p.op != 0:
			w.ErrorAnswers[strconv.Itoa(int(p.op))]++
		}
	}
	return w
}
