package com.batonhq.baton.it;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import com.batonhq.baton.AcquireOptions;
import com.batonhq.baton.BatonClient;
import com.batonhq.baton.BatonException;
import com.batonhq.baton.Holder;
import com.batonhq.baton.InstanceLockException;
import com.batonhq.baton.Lease;
import com.batonhq.baton.LockLostException;
import com.batonhq.baton.LockStatus;
import com.batonhq.baton.LockWatch;
import com.batonhq.baton.LockTypes;
import com.batonhq.baton.KeeperException;
import com.batonhq.baton.Op;
import com.batonhq.baton.OpAck;
import com.batonhq.baton.ZkBlockingWriteLock;

/**
 * The Java side of the integration tests that clients/java/javatest (Go) drives against a real
 * `baton serve` and ZooKeeper. Only the public API. One scenario per run:
 * {@code java -Dbaton.socket=S com.batonhq.baton.it.IntegrationTest SCENARIO ARGS...}; it prints
 * result lines the Go test checks, and exits 1 (with "FAIL ...") when its own checks fail.
 */
public final class IntegrationTest {
    static final BatonClient client = BatonClient.fromEnvironment();

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "exclusion" -> exclusion(args[1], Integer.parseInt(args[2]), Path.of(args[3]));
            case "scenario3" -> scenario3(args[1]);
            case "timeout" -> timeout(args[1], LockTypes.valueOf(args[2]));
            case "lost" -> lost(args[1], args[2]);
            case "ops" -> ops(args[1], args[2]);
            case "hold-and-exit" -> holdAndExit(args[1]);
            case "stall" -> stall(args[1]);
            case "watch" -> watch(args[1]);
            case "shared-on-plugin" -> sharedOnPlugin(args[1]);
            default -> fail("unknown scenario " + args[0]);
        }
        System.out.flush();
        System.exit(0);
    }

    /**
     * Watches object from its current state (free) and prints each holder it sees: "WATCH FREE
     * version=V", then "WATCH HELD token=T info=I" for each state with a holder (the Go side takes and
     * hands over the lock), until the object is free again: "WATCH FREE". An unchanged answer after
     * the timeout must carry the version asked after.
     */
    static void watch(String object) throws Exception {
        LockWatch w = client.waitChange(object, null, 0);
        if (!w.changed() || w.status().holder() != null) fail("first watch answer " + w + ", want free and changed");
        say("WATCH FREE version=" + w.version());
        boolean held = false;
        while (true) {
            LockWatch next = client.waitChange(object, w.version(), 30_000);
            if (!next.changed()) {
                if (!next.version().equals(w.version())) fail("unchanged answer " + next + " after version " + w.version());
                continue;
            }
            w = next;
            Holder h = w.status().holder();
            if (h != null) {
                held = true;
                say("WATCH HELD token=" + h.token() + " info=" + h.info());
            } else if (held && w.status().waiters().isEmpty()) {
                say("WATCH FREE");
                return;
            }
        }
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void fail(String why) {
        say("FAIL " + why);
        System.exit(1);
    }

    /**
     * n rounds of: take the lock (alternately through BatonClient and the plugin's
     * ZkBlockingWriteLock), create dir/inside exclusively (an existing file means someone else is
     * inside: overlap), append the token to dir/tokens.log, leave, release (every other
     * BatonClient lease with releaseNoWait). A Go holder does the same at the same time.
     */
    static void exclusion(String object, int n, Path dir) throws Exception {
        Path inside = dir.resolve("inside");
        Path log = dir.resolve("tokens.log");
        long last = 0;
        for (int i = 0; i < n; i++) {
            Lease lease = null;
            ZkBlockingWriteLock w = null;
            long token;
            if (i % 2 == 0) {
                lease = client.acquire(object, AcquireOptions.defaults().info("java " + i).maxWait(Duration.ofSeconds(60)));
                token = lease.token();
            } else {
                w = new ZkBlockingWriteLock("java " + i, null, object);
                w.lock();
                token = w.getFencingToken();
            }
            try {
                Files.createFile(inside);
            } catch (FileAlreadyExistsException e) {
                fail("overlap: java granted " + object + " (token " + token + ") while another holder was inside");
            }
            if (token <= last) fail("token " + token + " not above this process's previous " + last);
            last = token;
            Files.writeString(log, token + " java\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
            Thread.sleep(1);
            Files.delete(inside);
            if (lease != null) {
                if (lease.validFor().isZero()) fail("lease not valid at the end of the critical section");
                if (i % 4 == 0) {
                    lease.releaseNoWait(); // answered before its write lands: nobody is granted before it
                } else {
                    lease.close();
                }
            } else {
                if (w.validFor().isZero()) fail("lock not valid at the end of the critical section");
                w.unlock();
            }
        }
        say("DONE " + n);
    }

    static LockStatus waitWaiters(String object, int n) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            LockStatus s = client.inspect(object);
            if (s.waiters().size() == n) return s;
            if (System.nanoTime() > deadline) fail("waiters of " + object + ": " + s.waiters().size() + ", want " + n);
            Thread.sleep(10);
        }
    }

    /**
     * Scenario 3 of the seed: while a foreground holder works, a background request queues first and
     * a foreground one after it; on release the foreground request is granted first.
     */
    static void scenario3(String object) throws Exception {
        Lease holder = client.acquire(object, AcquireOptions.defaults().info("Save Content"));
        List<String> order = Collections.synchronizedList(new ArrayList<>());
        List<Long> tokens = Collections.synchronizedList(new ArrayList<>());
        AtomicReference<Throwable> err = new AtomicReference<>();
        Thread bg = new Thread(() -> {
            try {
                ZkBlockingWriteLock w = new ZkBlockingWriteLock("Bulk Propagation", null, object, LockTypes.BACKGROUND_LOCK);
                w.lock();
                order.add("background");
                tokens.add(w.getFencingToken());
                w.unlock();
            } catch (Throwable e) {
                err.set(e);
            }
        });
        bg.start();
        waitWaiters(object, 1);
        Thread fg = new Thread(() -> {
            try {
                ZkBlockingWriteLock w = new ZkBlockingWriteLock("Save Content 2", null, object);
                w.lock();
                order.add("foreground");
                tokens.add(w.getFencingToken());
                Thread.sleep(100); // the background request stays queued while this one works
                w.unlock();
            } catch (Throwable e) {
                err.set(e);
            }
        });
        fg.start();
        LockStatus s = waitWaiters(object, 2);
        List<String> queued = s.waiters().stream().map(Holder::type).toList();
        say("QUEUE " + String.join(",", queued));
        if (!queued.equals(List.of("foreground", "background"))) fail("grant order of the waiters: " + queued);
        if (s.holder() == null || s.holder().token() != holder.token()) fail("holder: " + s.holder());
        holder.close();
        fg.join(30_000);
        bg.join(30_000);
        if (err.get() != null) fail("waiter: " + err.get());
        say("ORDER " + String.join(",", order));
        if (!order.equals(List.of("foreground", "background"))) fail("granted in order " + order);
        if (!(holder.token() < tokens.get(0) && tokens.get(0) < tokens.get(1))) {
            fail("tokens not increasing: " + holder.token() + " " + tokens);
        }
        say("TOKENS " + holder.token() + " " + tokens.get(0) + " " + tokens.get(1));
    }

    /**
     * A shared acquire on the (plugin-protocol) sidecar: refused, not waited for; prints "REFUSED
     * status=S kind=K native=true|false" (native: the message names zookeeper.lock.protocol=native),
     * then takes the object exclusively and prints "HELD mode=M".
     */
    static void sharedOnPlugin(String object) throws Exception {
        try {
            client.acquire(object, AcquireOptions.defaults().shared(true).renew(false)).close();
            fail("a shared lock granted by a plugin-protocol sidecar");
        } catch (BatonException e) {
            say("REFUSED status=" + e.status() + " kind=" + e.kind() + " native="
                    + e.getMessage().contains("zookeeper.lock.protocol=native"));
        }
        try (Lease l = client.acquire(object, AcquireOptions.defaults().renew(false))) {
            say("HELD mode=" + l.mode());
        }
    }

    /** The plugin's lockWithTimeout() on an object someone else holds. */
    static void timeout(String object, LockTypes type) throws Exception {
        ZkBlockingWriteLock w = new ZkBlockingWriteLock("Save Content", null, object, type);
        long t0 = System.nanoTime();
        try {
            w.lockWithTimeout();
            fail("granted " + object + " although it is held");
        } catch (InstanceLockException e) {
            long ms = (System.nanoTime() - t0) / 1_000_000;
            Holder h = e.getHolder();
            say("ILE elapsed_ms=" + ms + " waited_ms=" + e.getWaitedMillis() + " position=" + e.getPosition()
                    + " type=" + e.getType() + " holder_sidecar=" + (h == null ? "" : h.sidecar())
                    + " holder_info=" + (h == null ? "" : h.info().replace(' ', '_'))
                    + " holder_token=" + (h == null ? 0 : h.token()));
        }
        w.unlock(); // not held: nothing
    }

    /**
     * Holds two objects, one through BatonClient, one through ZkBlockingWriteLock; prints HELD lines
     * and waits for the Go test to delete their privateLock nodes; both holders must be told.
     */
    static void lost(String object1, String object2) throws Exception {
        Lease l = client.acquire(object1, AcquireOptions.defaults().info("java lost test"));
        ZkBlockingWriteLock w = new ZkBlockingWriteLock("java lost test", null, object2);
        w.lockWithTimeout();
        CountDownLatch told = new CountDownLatch(2);
        AtomicReference<LockLostException> r1 = new AtomicReference<>();
        AtomicReference<LockLostException> r2 = new AtomicReference<>();
        l.addLostListener(e -> {
            r1.set(e);
            told.countDown();
        });
        w.addLostListener(e -> {
            r2.set(e);
            told.countDown();
        });
        say("HELD " + object1 + " " + l.token());
        say("HELD " + object2 + " " + w.getFencingToken());
        long t0 = System.nanoTime();
        if (!told.await(60, TimeUnit.SECONDS)) fail("not told of the loss within 60 s");
        say("LOST " + object1 + " reason=" + r1.get().reason().replace(' ', '_'));
        say("LOST " + object2 + " reason=" + r2.get().reason().replace(' ', '_'));
        say("TOLD_AFTER_MS " + (System.nanoTime() - t0) / 1_000_000);
        if (!l.validFor().isZero() || !w.validFor().isZero()) fail("still valid after the loss");
        try {
            l.close();
            fail("close() of a lost lease returned normally");
        } catch (LockLostException e) {
            say("CLOSE LockLostException");
        }
        try {
            w.unlock();
            fail("unlock() of a lost lock returned normally");
        } catch (RuntimeException e) {
            if (!(e.getCause() instanceof KeeperException.NoNodeException)) fail("unlock cause: " + e.getCause());
            say("UNLOCK NoNodeException");
        }
    }

    /** Submits a background op and waits until the sidecar delivered it (done). */
    static void ops(String object, String id) throws Exception {
        String payload = "{\"from\":\"java\",\"n\":[1,2,3]}";
        OpAck a = client.submit(id, object, "java op", payload);
        say("SUBMITTED " + a.id() + " " + a.state() + " duplicate=" + a.duplicate());
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        Op op;
        while (true) {
            op = client.op(id);
            if (op.state().equals("done")) break;
            if (System.nanoTime() > deadline) fail("op " + id + " not done: " + op);
            Thread.sleep(20);
        }
        say("DONE " + op.id() + " attempts=" + op.attempts() + " seq=" + op.seq());
        OpAck again = client.submit(id, object, "java op", payload);
        say("AGAIN " + again.state() + " duplicate=" + again.duplicate());
    }

    /**
     * Holds a lock while the Go test stops the sidecar (SIGSTOP): with no confirmation coming, the
     * holder must be told when its validity runs out, before ZooKeeper expires the sidecar's session
     * and could grant the lock elsewhere. Prints the wall-clock time it was told.
     */
    static void stall(String object) throws Exception {
        Lease l = client.acquire(object, AcquireOptions.defaults().lease(Duration.ofMinutes(1)));
        CountDownLatch told = new CountDownLatch(1);
        long[] at = new long[1];
        AtomicReference<LockLostException> why = new AtomicReference<>();
        l.addLostListener(e -> {
            at[0] = System.currentTimeMillis();
            why.set(e);
            told.countDown();
        });
        say("HELD " + l.token() + " valid_for_ms=" + l.validFor().toMillis());
        if (!told.await(90, TimeUnit.SECONDS)) fail("not told of the loss within 90 s");
        say("LOST at_ms=" + at[0] + " reason=" + why.get().reason().replace(' ', '_'));
    }

    /** Takes a lock and dies without releasing it: the sidecar must free it at once (bind process). */
    static void holdAndExit(String object) throws Exception {
        Lease l = client.acquire(object, AcquireOptions.defaults().lease(Duration.ofMinutes(5)));
        say("HELD " + l.token());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        in.readLine(); // the Go test says when
        Runtime.getRuntime().halt(0);
    }
}
