// Package testenv starts real servers for Baton's tests, benchmarks and
// `baton dev`: ZooKeeper (Debian's package, run with plain java), an
// in-process Kafka-protocol broker (franz-go's kfake), and a TCP fault proxy.
// Nothing here is a mock.
//
// The core API does not import "testing" (it is linked into the `baton dev`
// binary). Tests use the ...T helpers, which take a [TB] (any testing.TB),
// fail the test with Fatalf when a server cannot start, and stop it in
// t.Cleanup:
//
//	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})          // standalone, tickTime 500ms
//	e := testenv.ZooKeeperT(t, testenv.ZKOptions{Nodes: 3})  // ensemble
//	conn, _, err := zk.Connect(z.Servers(), 4*time.Second)
//	e.Kill(leader); e.WaitReady(ctx); e.Restart(leader)      // faults per node
//	k := testenv.KafkaT(t, testenv.KafkaOptions{Proxy: true})
//	k.Proxy().BlackHole()                                   // a Kafka outage; Heal ends it
//	p := testenv.ProxyT(t, z.Addr(1))                       // fault proxy before a ZooKeeper node
//
// # ZooKeeper
//
// [StartZooKeeper] runs each node as `java -Xmx128m -XX:+UseSerialGC
// -XX:TieredStopAtLevel=1 ... org.apache.zookeeper.server.quorum.QuorumPeerMain
// zoo.cfg` with the minimal classpath from /usr/share/java (as
// shared/tools/zk.sh does), the admin server off, the four-letter words ruok,
// srvr, mntr, stat, conf, cons and isro whitelisted, clients on 127.0.0.1 only
// and, for ensembles, quorum and election ports bound to 127.0.0.1. It returns
// once the four-letter word srvr shows every node serving (standalone, or one
// leader and followers). The container reaper runs every 100ms and also reaps
// never-used containers after 1s (JVM properties, see [ZKOptions]). A missing
// java or missing jars give an error wrapping [ErrNotInstalled] that contains
// [InstallCommand]; there is no skip. 128m of heap was measured to be enough
// (resident size ~60 MB per node either way), so three ensembles fit at once.
//
// # Ports
//
// Servers listen on loopback ports reserved with [ReservePorts]: a flock'ed
// lock file per port under os.TempDir()/baton-ports (like Consul's
// sdk/freeport), from a range below the kernel's ephemeral ports, held while
// the server lives, plus a check that the port can be listened on. This keeps
// packages that `go test` runs in parallel processes apart.
//
// # No server left behind
//
// Stop (SIGTERM, then SIGKILL) runs in cleanup. If the owning process dies
// instead (a test binary killed by go test's timeout, a SIGKILL), each java
// child dies with it: it is started with Setpgid and Pdeathsig=SIGKILL from a
// goroutine that keeps its OS thread locked, and alive, for as long as the
// child runs (Pdeathsig fires when the forking thread exits, not the process).
// As a second line, every start reaps servers whose owner is gone: their
// command line carries -Dbaton.testenv.owner=PID:STARTTIME, and only processes
// with that marker are ever killed ([ReapStale]). Temp dirs of dead owners are
// removed too.
//
// # Kafka
//
// [StartKafka] runs one kfake broker in process on a reserved port, with the
// given topics seeded. kfake keeps everything in memory, so an outage is
// simulated with a proxy in front of a broker that stays up. A Kafka client
// bootstraps and then connects to the broker address advertised in metadata,
// which would bypass a plain proxy; with KafkaOptions.Proxy the broker's
// listener reports the proxy's address (kfake.ListenFn), so the broker
// advertises the proxy and every connection goes through it. Addr then
// returns the proxy's address and [Kafka.Proxy] the proxy.
//
// # Fault proxy
//
// [Proxy] is a small TCP proxy of our own rather than toxiproxy: its black
// holes drop bytes (never deliver them late after Heal), stall new
// connections too, forward a request while swallowing its reply
// ([Proxy.BlackHoleDownstream]), hide a peer's close while black-holed, reset
// connections with RST, and Close waits for all its goroutines, which is what
// fault tests and goleak need; it also keeps prometheus and zerolog out of the
// `baton dev` binary.
//
// # Guarantees
//
// Every type's methods are safe for concurrent use; Stop and Close are
// idempotent and leave no goroutine behind. Timings (start ~0.3-1s
// standalone, ~1-3s ensemble on 2 shared cores) are not guaranteed: wait on
// conditions ([ZooKeeper.WaitReady], session events), not on sleeps.
package testenv
