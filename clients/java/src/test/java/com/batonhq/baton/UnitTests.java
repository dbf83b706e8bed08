package com.batonhq.baton;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.math.BigInteger;
import java.net.SocketTimeoutException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import com.batonhq.baton.FakeSidecar.Answer;

/**
 * Unit tests of the Java client: the JSON reader/writer, the HTTP exchange, error mapping,
 * validity counting, renewal and loss, and the plugin drop-in, against {@link FakeSidecar}.
 * A tiny runner: every static void method whose name starts with "test" runs; any exception fails
 * it. {@code java ... com.batonhq.baton.UnitTests [name-substring]}; exit 1 if any failed.
 */
public final class UnitTests {
    public static void main(String[] args) throws Exception {
        String only = args.length > 0 ? args[0] : "";
        int passed = 0;
        int failed = 0;
        for (Method m : UnitTests.class.getDeclaredMethods()) {
            if (!m.getName().startsWith("test") || !Modifier.isStatic(m.getModifiers()) || !m.getName().contains(only)) {
                continue;
            }
            long t0 = System.nanoTime();
            try {
                m.invoke(null);
                passed++;
                System.out.printf("PASS %s (%d ms)%n", m.getName(), (System.nanoTime() - t0) / 1_000_000);
            } catch (InvocationTargetException e) {
                failed++;
                System.out.printf("FAIL %s: %s%n", m.getName(), e.getCause());
                e.getCause().printStackTrace(System.out);
            }
        }
        System.out.printf("unit tests: %d passed, %d failed%n", passed, failed);
        System.exit(failed == 0 && passed > 0 ? 0 : 1);
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void eq(Object want, Object got, String what) {
        if (want == null ? got != null : !want.equals(got)) {
            throw new AssertionError(what + ": want <" + want + ">, got <" + got + ">");
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static <T extends Throwable> T expect(Class<T> type, Body b) throws Exception {
        try {
            b.run();
        } catch (Throwable t) {
            if (type.isInstance(t)) return type.cast(t);
            throw new AssertionError("want " + type.getSimpleName() + ", got " + t, t);
        }
        throw new AssertionError("want " + type.getSimpleName() + ", got no exception");
    }

    static String lease(String state, long validForMs, String extra) {
        return "{\"lease_id\":\"inc1-abcdef\",\"object\":\"P1\",\"type\":\"foreground\",\"info\":\"save\","
                + "\"token\":\"123456789012\",\"node\":\"A-0000000007\",\"acquired_at\":\"2026-11-24T08:00:00.000Z\","
                + "\"lease_expires_at\":\"2026-11-24T08:00:30.000Z\",\"valid_until\":\"2026-11-24T08:00:04.000Z\","
                + "\"valid_for_ms\":" + validForMs + ",\"state\":\"" + state + "\",\"waited_ms\":5,\"holds\":1,"
                + "\"preemptible\":false" + extra + "}";
    }

    /** A long-poll that never answers until the lease is closed. */
    static Answer idle(FakeSidecar.Req r) {
        return Answer.hanging();
    }

    // ---- JSON ----

    static void testJsonParse() {
        Map<String, Object> m = Json.parseObject(" {\"a\":1,\"b\":-2.5e1,\"c\":\"x\\\"y\\u00e9\\ud83d\\ude00\\n\","
                + "\"d\":[true,false,null,{}],\"e\":{\"f\":[]},\"g\":12345678901234567890,\"h\":0,\"i\":-0.5} ");
        eq(1L, m.get("a"), "a");
        eq(-25.0, m.get("b"), "b");
        eq("x\"yé\uD83D\uDE00\n", m.get("c"), "c");
        eq(java.util.Arrays.asList(true, false, null, Map.of()), m.get("d"), "d");
        eq(Map.of("f", List.of()), m.get("e"), "e");
        eq(new BigInteger("12345678901234567890"), m.get("g"), "g");
        eq(0L, m.get("h"), "h");
        eq(-0.5, m.get("i"), "i");
        check(m.containsKey("d"), "member order kept");
        eq(List.of("a", "b", "c", "d", "e", "f".equals("") ? "" : "e").size(), 6, "sanity");
    }

    static void testJsonRejects() throws Exception {
        for (String bad : new String[] {"", "{", "{\"a\":}", "{\"a\":1,}", "[1,]", "01", "1.", "\"abc", "\"a\u0001\"",
                "{\"a\":1} x", "tru", "{a:1}", "\"\\x\"", "-", "1e", "\"\\u12\""}) {
            expect(IllegalArgumentException.class, () -> Json.parse(bad));
        }
        expect(IllegalArgumentException.class, () -> Json.parseObject("[1]"));
    }

    static void testJsonWriteRoundTrip() {
        String s = "q\"b\\n\n\r\t\u0001\u2028é😀";
        Map<String, Object> in = new java.util.LinkedHashMap<>();
        in.put("s", s);
        in.put("n", 42L);
        in.put("neg", -7);
        in.put("d", 1.5);
        in.put("t", true);
        in.put("z", null);
        in.put("l", List.of(1L, "two", Map.of("k", "v")));
        String w = Json.write(in);
        check(!w.contains("\n") && !w.contains("\u0001") && !w.contains("\u2028"), "control characters escaped: " + w);
        Map<String, Object> out = Json.parseObject(w);
        eq(s, out.get("s"), "string round trip");
        eq(42L, out.get("n"), "n");
        eq(-7L, out.get("neg"), "neg");
        eq(1.5, out.get("d"), "d");
        eq(true, out.get("t"), "t");
        check(out.containsKey("z") && out.get("z") == null, "null kept");
        eq(List.of(1L, "two", Map.of("k", "v")), out.get("l"), "list");
        eq("{\"p\":{\"raw\":[1]}}", Json.write(Map.of("p", new Json.Raw("{\"raw\":[1]}"))), "raw");
    }

    static void testEscapePathSegment() {
        eq("a%2Fb", BatonClient.escape("a/b"), "slash");
        eq("%2E%2E", BatonClient.escape(".."), "dot-dot");
        eq("%2E", BatonClient.escape("."), "dot");
        eq("A-1.x_~", BatonClient.escape("A-1.x_~"), "unreserved");
        eq("%C3%A4%20%3F%25", BatonClient.escape("ä ?%"), "utf-8 and reserved");
    }

    // ---- HTTP exchange and answers ----

    static void testAcquireParsesLeaseAndToleratesUnknown() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> r.target().contains("wait=lost") ? Answer.hanging()
                : Answer.json(200, lease("draining", 4000, ",\"future\":{\"x\":[1,{\"y\":null}]},\"bind\":\"process\""))
                        .asChunked());
                BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults().info("save \"it\"").maxWait(Duration.ofNanos(1_500_000))
                    .lease(Duration.ofSeconds(20)).renew(false));
            eq(123456789012L, l.token(), "token from a JSON string");
            eq("A-0000000007", l.node(), "node");
            eq("draining", l.state(), "unknown state passed through");
            check(l.isHeld() && l.lostCause() == null, "a state this client does not know is not a loss");
            eq(20000L, l.lengthMillis(), "length");
            check(l.answerMember("future") instanceof Map, "unknown member kept");
            Map<String, Object> sent = Json.parseObject(f.requests("POST", "/v1/locks/P1/acquire").get(0).body());
            eq("foreground", sent.get("type"), "type sent");
            eq("save \"it\"", sent.get("info"), "info sent");
            eq(2L, sent.get("wait_ms"), "1.5 ms rounded up, not down to 0 = try once");
            eq(20000L, sent.get("lease_ms"), "lease_ms sent");
            eq("process", sent.get("bind"), "bound to this process by default");
            check(l.drainFor().isEmpty(), "not draining without drain_ends_at");
            Lease nb = c.acquire("P1", AcquireOptions.defaults().bindToProcess(false).renew(false));
            check(!Json.parseObject(f.requests("POST", "/v1/locks/P1/acquire").get(1).body()).containsKey("bind"),
                    "bindToProcess(false): no bind member");
            check(nb.isHeld(), "held");
        }
    }

    static void testInspectParked() throws Exception {
        String holder = "{\"type\":\"foreground\",\"node\":\"A_x_r1_0000000003\",\"token\":\"77\",\"since\":\"2026-11-27T19:00:00Z\"}";
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(200, r.target().contains("P2")
                ? "{\"object\":\"P2\",\"holder\":" + holder + ",\"holders\":[" + holder + "],\"waiters\":[],\"parked\":3}"
                : "{\"object\":\"P3\",\"holder\":null,\"waiters\":[]}"));
                BatonClient c = new BatonClient(f.socket)) {
            LockStatus s = c.inspect("P2");
            eq(3, s.parked(), "parked counted");
            eq(77L, s.holder().token(), "holder's token");
            check(s.waiters().isEmpty(), "parked requests are not waiters");
            LockStatus free = c.inspect("P3");
            eq(0, free.parked(), "parked absent: 0");
            check(free.holder() == null && free.holders().isEmpty(), "free");
        }
    }

    static void testAcquireAllAndPermitRequests() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(200, lease("held", 4000,
                ",\"objects\":[{\"object\":\"a\",\"token\":\"7\",\"node\":\"A-1\"},{\"object\":\"b\",\"token\":\"9\",\"node\":\"A-2\"}]"
                        + ",\"permit\":1")));
                BatonClient c = new BatonClient(f.socket)) {
            Lease set = c.acquireAll(List.of("b", "a"), AcquireOptions.defaults().renew(false));
            Map<String, Object> sent = Json.parseObject(f.requests("POST", "/v1/locks/acquire").get(0).body());
            eq(List.of("b", "a"), sent.get("objects"), "objects sent as given (the sidecar orders them)");
            check(set.answerMember("objects") instanceof List<?> l && l.size() == 2, "the set's objects in the answer");
            Lease p = c.acquirePermit("pool/x", 3, AcquireOptions.defaults().renew(false));
            sent = Json.parseObject(f.requests("POST", "/v1/semaphores/pool%2Fx/acquire").get(0).body());
            eq(3L, sent.get("permits"), "permits sent");
            eq(1L, p.answerMember("permit"), "the permit in the answer");
            check(!sent.containsKey("mode"), "no mode unless shared");
            eq("exclusive", p.mode(), "a lease without mode (an older sidecar) is exclusive");
            c.acquireAll(List.of("b", "a"), AcquireOptions.defaults().shared(true).renew(false));
            sent = Json.parseObject(f.requests("POST", "/v1/locks/acquire").get(1).body());
            eq("shared", sent.get("mode"), "shared(true): mode shared sent");
        }
    }

    static void testValidityCountedFromSendTime() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(200, lease("held", 5000, "")).delayed(400));
                BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults().renew(false));
            long left = l.validFor().toMillis();
            check(left <= 4605, "validity counted from the request's send time + waited_ms 5 (answer took 400 ms of 5000): left " + left);
            check(left > 0, "still valid: " + left);
        }
    }

    static void testValidityOfAcquireAddsWaited() throws Exception {
        // the acquire waited 5 s in the sidecar: validity counts from send + waited, not from send
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(200,
                lease("draining", 3000, ",\"drain_ends_at\":\"2026-11-24T08:00:09.000Z\",\"drain_for_ms\":2900")
                        .replace("\"waited_ms\":5", "\"waited_ms\":5000")));
                BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults().renew(false));
            long left = l.validFor().toMillis();
            check(left > 5000 && left <= 8000, "send + waited_ms + valid_for_ms: left " + left);
            long drain = l.drainFor().orElseThrow().toMillis();
            check(drain > 5000 && drain <= 7900, "drain counted the same way: " + drain);
        }
    }

    static void testInstanceLockException() throws Exception {
        String body = "{\"error\":\"InstanceLockException\",\"message\":\"not granted\",\"object\":\"P1\","
                + "\"type\":\"background\",\"waited_ms\":2001,\"position\":2,\"holder\":{\"node\":\"A-0000000003\","
                + "\"type\":\"foreground\",\"info\":\"Save Content\",\"sidecar\":\"node-1\",\"token\":\"77\","
                + "\"since\":\"2026-11-24T08:00:00.000Z\",\"new\":1},\"extra\":[1]}";
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(423, body));
                BatonClient c = new BatonClient(f.socket)) {
            InstanceLockException e = expect(InstanceLockException.class,
                    () -> c.acquire("P1", AcquireOptions.defaults().type(LockTypes.BACKGROUND_LOCK)));
            eq("P1", e.getObject(), "object");
            eq("background", e.getType(), "type");
            eq(2001L, e.getWaitedMillis(), "waited");
            eq(2, e.getPosition(), "position");
            eq(new Holder("A-0000000003", "foreground", "Save Content", "node-1", 77, "2026-11-24T08:00:00.000Z"),
                    e.getHolder(), "holder");
            eq("not granted", e.getMessage(), "message");
        }
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(423, "{\"error\":\"InstanceLockException\",\"message\":\"m\",\"holder\":null}"));
                BatonClient c = new BatonClient(f.socket)) {
            InstanceLockException e = expect(InstanceLockException.class, () -> c.lock("P1"));
            check(e.getHolder() == null && e.getPosition() == 0, "holder null, position unknown");
        }
    }

    static void testErrorKinds() throws Exception {
        AtomicReference<Answer> next = new AtomicReference<>();
        try (FakeSidecar f = new FakeSidecar(r -> next.get()); BatonClient c = new BatonClient(f.socket)) {
            next.set(Answer.json(400, "{\"error\":\"BadRequest\",\"message\":\"object: empty\",\"field\":\"object\"}"));
            BatonException b = expect(BatonException.class, () -> c.lock("x"));
            eq(400, b.status(), "status");
            eq("BadRequest", b.kind(), "kind");
            eq("object", b.field(), "field");
            next.set(Answer.json(503, "{\"error\":\"ZooKeeperUnavailable\",\"message\":\"down\"}"));
            UnavailableException u = expect(UnavailableException.class, () -> c.lock("x"));
            eq("ZooKeeperUnavailable", u.kind(), "503 kind");
            next.set(Answer.json(502, "<html>bad gateway</html>"));
            BatonException g = expect(BatonException.class, () -> c.lock("x"));
            check(g.getMessage().contains("unexpected answer"), "non-JSON answer named: " + g.getMessage());
        }
        try (BatonClient c = new BatonClient(Path.of("/nonexistent/baton.sock"))) {
            UnavailableException u = expect(UnavailableException.class, () -> c.lock("x"));
            eq(0, u.status(), "no answer");
        }
    }

    static void testKeepAliveAndStaleConnection() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(200, "{\"status\":\"serving\",\"ready\":true}"));
                BatonClient c = new BatonClient(f.socket)) {
            c.ready();
            c.ready();
            c.ready();
            eq(1, f.accepted.get(), "one kept-alive connection for three requests");
            f.dropConnections(); // the sidecar's idle timeout
            c.ready();
            eq(2, f.accepted.get(), "a stale idle connection is replaced, the request sent again");
            f.setHandler(r -> Answer.json(200, "{}").closing());
            c.ready(); // on the kept-alive connection, which the answer closes
            c.ready();
            c.ready();
            eq(4, f.accepted.get(), "Connection: close is honoured: a new connection per request");
        }
    }

    static void testDeadlineAndInterrupt() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> Answer.hanging()); BatonClient c = new BatonClient(f.socket)) {
            long t0 = System.nanoTime();
            expect(SocketTimeoutException.class, () -> c.send("GET", "/readyz", null, 200));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            check(ms >= 190 && ms < 60000, "deadline kept: " + ms + " ms");

            BlockingQueue<Throwable> got = new ArrayBlockingQueue<>(1);
            Thread t = new Thread(() -> {
                try {
                    c.acquire("P1", AcquireOptions.defaults().maxWait(Duration.ofMinutes(5)));
                    got.add(new AssertionError("granted"));
                } catch (Throwable e) {
                    got.add(e);
                }
            });
            int closedBefore = f.closedByClient.get();
            t.start();
            while (f.requests("POST", "/v1/locks/P1/acquire").isEmpty()) Thread.sleep(5);
            t.interrupt();
            Throwable e = got.poll(20, TimeUnit.SECONDS);
            check(e instanceof InterruptedException, "interrupt abandons the acquire: " + e);
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (f.closedByClient.get() == closedBefore && System.nanoTime() < deadline) Thread.sleep(5);
            check(f.closedByClient.get() > closedBefore, "the connection was closed, so the sidecar drops the wait");

            Thread.currentThread().interrupt(); // already interrupted: the channel operation itself refuses
            expect(InterruptedException.class, () -> c.acquire("P1", AcquireOptions.defaults()));
            check(!Thread.interrupted(), "InterruptedException thrown, interrupt status consumed");
        }
    }

    // ---- lease: renewal and loss ----

    static void testRenewalKeepsLeaseValid() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> {
            if (r.target().contains("wait=lost")) return Answer.hanging();
            return Answer.json(200, lease("held", 3000, ""));
        }); BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults().lease(Duration.ofMillis(900)));
            Thread.sleep(1500);
            check(l.isHeld(), "renewed, still held: " + l.lostCause());
            int renews = f.requests("POST", "/v1/leases/inc1-abcdef/renew").size();
            check(renews >= 3, "renewed at a third of the 900 ms lease: " + renews);
            l.close();
            eq(1, f.requests("DELETE", "/v1/leases/inc1-abcdef").size(), "released once");
            check(l.validFor().isZero(), "not valid after release");
            l.close(); // idempotent
            eq(1, f.requests("DELETE", "/v1/leases/inc1-abcdef").size(), "close after release sends nothing");
        }
    }

    static void testValidityRunsOutWithoutConfirmation() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> {
            if (r.method().equals("POST") && r.target().endsWith("/acquire")) return Answer.json(200, lease("held", 400, ""));
            if (r.method().equals("DELETE")) return Answer.json(200, "{\"released\":true}");
            return Answer.hanging(); // renewals and long-polls never answer
        }); BatonClient c = new BatonClient(f.socket)) {
            long t0 = System.nanoTime();
            Lease l = c.acquire("P1", AcquireOptions.defaults());
            CountDownLatch lost = new CountDownLatch(1);
            AtomicReference<LockLostException> why = new AtomicReference<>();
            l.addLostListener(e -> {
                why.set(e);
                lost.countDown();
            });
            check(lost.await(20, TimeUnit.SECONDS), "told lost");
            long ms = (System.nanoTime() - t0) / 1_000_000;
            check(ms >= 400, "not before its validity ran out: " + ms);
            eq("validity ran out", why.get().reason(), "reason");
            check(l.validFor().isZero(), "zero validity once lost");
            LockLostException e = expect(LockLostException.class, l::close);
            eq("validity ran out", e.reason(), "close reports the loss");
        }
    }

    static void testLongPollReportsLoss() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> {
            if (r.target().contains("wait=lost")) {
                eq("/v1/leases/inc1-abcdef?wait=lost&timeout_ms=30000&state=held", r.target(), "long-poll target (with the state last seen)");
                return Answer.json(200, lease("lost", 0, ",\"reason\":\"lock node deleted by someone else\"")).delayed(150);
            }
            if (r.method().equals("DELETE")) {
                return Answer.json(410, "{\"error\":\"LockLost\",\"message\":\"gone\",\"reason\":\"lock node deleted by someone else\"}");
            }
            return Answer.json(200, lease("held", 30000, ""));
        }); BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults());
            BlockingQueue<LockLostException> q = new ArrayBlockingQueue<>(2);
            l.addLostListener(q::add);
            LockLostException e = q.poll(20, TimeUnit.SECONDS);
            check(e != null, "listener told");
            eq("lock node deleted by someone else", e.reason(), "reason");
            check(!l.isHeld(), "not held");
            List<LockLostException> late = new java.util.ArrayList<>();
            l.addLostListener(late::add);
            eq(1, late.size(), "a listener added after the loss is told at once");
            expect(LockLostException.class, l::release);
            check(q.isEmpty(), "told once");
        }
    }

    static void testRenew410IsLoss() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> {
            if (r.target().endsWith("/renew")) {
                return Answer.json(410, "{\"error\":\"LockLost\",\"message\":\"m\",\"reason\":\"sidecar restarted\"}");
            }
            return Answer.json(200, lease("held", 30000, ""));
        }); BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults().renew(false));
            LockLostException e = expect(LockLostException.class, l::renew);
            eq("sidecar restarted", e.reason(), "reason");
            eq(410, e.status(), "status");
            check(l.lostCause() != null && !l.isHeld(), "marked lost");
        }
    }

    // ---- the plugin drop-in ----

    static void testZkBlockingWriteLock() throws Exception {
        AtomicReference<Answer> acquire = new AtomicReference<>(Answer.json(200, lease("held", 30000, "")));
        AtomicReference<Answer> release = new AtomicReference<>(Answer.json(200, "{\"released\":true,\"object\":\"P1\",\"token\":\"1\"}"));
        try (FakeSidecar f = new FakeSidecar(r -> {
            if (r.target().contains("wait=lost")) return Answer.hanging();
            if (r.target().endsWith("/acquire")) return acquire.get();
            if (r.method().equals("DELETE")) return release.get();
            return Answer.json(200, lease("held", 30000, ""));
        }); BatonClient c = new BatonClient(f.socket)) {
            ZkBlockingWriteLock w = new ZkBlockingWriteLock("Bulk Propagation", c, "P1", LockTypes.BACKGROUND_LOCK);
            w.unlock(); // not held: nothing, as the plugin
            w.lockWithTimeout();
            Map<String, Object> sent = Json.parseObject(f.requests("POST", "/v1/locks/P1/acquire").get(0).body());
            eq("background", sent.get("type"), "type");
            eq("Bulk Propagation", sent.get("info"), "lockInfo is the info");
            check(!sent.containsKey("wait_ms"), "lockWithTimeout takes the timeout from the sidecar's properties");
            eq(123456789012L, w.getFencingToken(), "token");
            eq("A-0000000007", w.getLockName(), "lock name");
            expect(IllegalStateException.class, w::lockWithTimeout);
            w.unlock();
            eq(1, f.requests("DELETE", "/v1/leases/").size(), "released");
            w.unlock(); // twice: nothing

            acquire.set(Answer.json(423, "{\"error\":\"InstanceLockException\",\"message\":\"m\",\"position\":1,"
                    + "\"holder\":{\"node\":\"A-0000000001\",\"sidecar\":\"s\"}}"));
            InstanceLockException ile = expect(InstanceLockException.class, w::lockWithTimeout);
            eq(1, ile.getPosition(), "position");
            eq("A-0000000001", ile.getHolder().node(), "holder");

            acquire.set(Answer.json(503, "{\"error\":\"ZooKeeperUnavailable\",\"message\":\"down\"}"));
            KeeperException ke = expect(KeeperException.ConnectionLossException.class, w::lockWithTimeout);
            eq(KeeperException.Code.CONNECTIONLOSS, ke.code(), "code");
            acquire.set(Answer.json(400, "{\"error\":\"BadRequest\",\"message\":\"info too long\",\"field\":\"info\"}"));
            expect(KeeperException.BadArgumentsException.class, w::lockWithTimeout);

            acquire.set(Answer.json(200, lease("held", 30000, "")));
            w.lockWithTimeout();
            release.set(Answer.json(404, "{\"error\":\"NoNode\",\"message\":\"no such lease\"}"));
            w.unlock(); // already gone: ignored as the plugin ignored NoNode

            w.lockWithTimeout();
            release.set(Answer.json(410, "{\"error\":\"LockLost\",\"message\":\"m\",\"reason\":\"zookeeper session lost\"}"));
            RuntimeException re = expect(RuntimeException.class, w::unlock);
            check(re.getCause() instanceof KeeperException.NoNodeException, "a lost lock is told at unlock: " + re.getCause());
            check(re.getMessage().contains("zookeeper session lost"), "reason named: " + re.getMessage());
        }
        try {
            // the zk argument of the plugin is accepted and ignored; the sidecar comes from baton.socket
            System.setProperty("baton.socket", "/nonexistent/x.sock");
            ZkBlockingWriteLock w = new ZkBlockingWriteLock("Save Content", new Object(), "P2");
            expect(KeeperException.ConnectionLossException.class, w::lockWithTimeout);
        } finally {
            System.clearProperty("baton.socket");
        }
    }

    static void testSubmitOp() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> r.method().equals("POST")
                ? Answer.json(202, "{\"id\":\"op-1\",\"state\":\"queued\",\"new_member\":true}")
                : Answer.json(200, "{\"id\":\"op-1\",\"object\":\"P1\",\"state\":\"retrying\",\"attempts\":2,"
                        + "\"last_error\":\"423\",\"next_attempt_at\":null,\"accepted_at\":\"2026-11-24T08:00:00.000Z\",\"seq\":9}"));
                BatonClient c = new BatonClient(f.socket)) {
            OpAck a = c.submit("op-1", "P1", "reindex", "{\"n\":[1,2]}");
            eq(new OpAck("op-1", "queued", false), a, "ack");
            Map<String, Object> sent = Json.parseObject(f.requests("POST", "/v1/ops").get(0).body());
            eq(Map.of("n", List.of(1L, 2L)), sent.get("payload"), "payload sent as JSON, not as a string");
            Op op = c.op("op-1");
            eq(new Op("op-1", "P1", "retrying", 2, "423", "", "2026-11-24T08:00:00.000Z", 9), op, "op");
            expect(IllegalArgumentException.class, () -> c.submit(null, "P1", null, "{bad"));
        }
    }

    /**
     * A request written whole on a kept-alive connection that the sidecar then closes without an
     * answer may have been carried out: a submit without an id and an acquire (POST) and a release
     * (DELETE) are not sent again; a GET is; an idle connection the sidecar had closed before the
     * request is replaced and the request sent once.
     */
    static void testNoResendAfterConnectionClosedBeforeAnswer() throws Exception {
        String ready = "{\"status\":\"serving\",\"ready\":true}";
        try (FakeSidecar f = new FakeSidecar(r -> Answer.json(200, ready));
                BatonClient c = new BatonClient(f.socket)) {
            c.ready(); // a kept-alive connection
            f.setHandler(r -> r.method().equals("GET") ? Answer.json(200, ready) : Answer.dropping());
            UnavailableException e = expect(UnavailableException.class, () -> c.submit(null, "P1", null, "{}"));
            eq(1, f.requests("POST", "/v1/ops").size(), "a submit without an id is sent once");
            check(e.getMessage().contains("not sent again: it may have been carried out"), "message: " + e.getMessage());
            c.ready();
            expect(UnavailableException.class, () -> c.acquire("P1", AcquireOptions.defaults().renew(false)));
            eq(1, f.requests("POST", "/v1/locks/P1/acquire").size(), "an acquire is sent once");

            f.setHandler(r -> r.method().equals("POST") ? Answer.json(200, lease("held", 3000, "")) : Answer.dropping());
            Lease l = c.acquire("P1", AcquireOptions.defaults().renew(false));
            e = expect(UnavailableException.class, l::release);
            eq(1, f.requests("DELETE", "/v1/leases/").size(), "a release is sent once");
            check(!e.getMessage().contains(l.id()), "the live lease id is not in the message: " + e.getMessage());

            java.util.concurrent.atomic.AtomicInteger gets = new java.util.concurrent.atomic.AtomicInteger();
            f.setHandler(r -> gets.incrementAndGet() == 2 ? Answer.dropping() : Answer.json(200, ready));
            c.ready(); // gets 1: keeps the connection
            int before = f.requests("GET", "/readyz").size();
            c.ready(); // gets 2 dropped on the reused connection, gets 3 answered on a new one
            eq(before + 2, f.requests("GET", "/readyz").size(), "a GET is sent again after a drop");

            f.setHandler(r -> r.method().equals("POST") ? Answer.json(202, "{\"id\":\"op-2\",\"state\":\"queued\"}")
                    : Answer.json(200, ready));
            c.ready();
            int accepted = f.accepted.get();
            f.dropConnections(); // the sidecar's idle timeout, before the request
            eq(new OpAck("op-2", "queued", false), c.submit(null, "P1", null, "{}"), "submit after an idle close");
            eq(2, f.requests("POST", "/v1/ops").size(), "sent once more in all: the new submit");
            eq(accepted + 1, f.accepted.get(), "on a new connection");
        }
    }

    /** Neither toString() nor the loss messages of a lease carry its id. */
    static void testLeaseIdNotPrinted() throws Exception {
        try (FakeSidecar f = new FakeSidecar(r -> r.method().equals("POST") && r.target().endsWith("/acquire")
                ? Answer.json(200, lease("held", 3000, ""))
                : Answer.json(410, "{\"error\":\"LockLost\",\"message\":\"lost\",\"reason\":\"revoked\"}"));
                BatonClient c = new BatonClient(f.socket)) {
            Lease l = c.acquire("P1", AcquireOptions.defaults().renew(false));
            eq("inc1-abcdef", l.id(), "id");
            check(!l.toString().contains(l.id()) && l.toString().contains("token=123456789012"), "toString: " + l);
            l.apply(Json.parseObject(lease("lost", 0, ",\"reason\":\"revoked\"")), System.nanoTime());
            LockLostException lost = l.lostCause();
            check(lost != null && !lost.getMessage().contains(l.id()), "loss message: " + lost);
        }
    }

    static void testSurfaceCompilesAgainstIOException() {
        // the exception hierarchy the README documents
        check(IOException.class.isAssignableFrom(BatonException.class), "BatonException is an IOException");
        check(BatonException.class.isAssignableFrom(LockLostException.class), "LockLost");
        check(!RuntimeException.class.isAssignableFrom(InstanceLockException.class), "InstanceLockException checked");
        check(!RuntimeException.class.isAssignableFrom(KeeperException.class), "KeeperException checked");
    }
}
