package com.batonhq.baton;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * A lock held through the sidecar. Hand {@link #token()} (the fencing token) to the storage with
 * every write, and check {@link #validFor()} (or listen with {@link #addLostListener}) before a
 * critical one.
 *
 * <p>Validity is counted as the Go client does, conservatively: from the moment the request whose
 * answer confirmed it was <em>sent</em> (this JVM's monotonic clock), plus that answer's
 * {@code valid_for_ms}. The sidecar never frees the lock before the validity it last told, so a
 * holder that stops writing when {@code validFor()} reaches zero is never overlapped. Unless acquired
 * with {@code renew(false)}, two daemon threads keep it: one renews at a third of the lease length
 * and at half of the validity left; one long-polls {@code GET /v1/leases/{id}?wait=lost} so a loss
 * reported by the sidecar (node deleted, session lost, revoked) reaches the lost-listeners at once.
 * Validity running out without a confirmation is a loss too. Closing releases the lock.
 *
 * <p><b>Stop by.</b> A holder must stop a grace G (the time its write in flight needs) before the
 * validity ends, not at the instant it ends: the policy of {@code baton lock --kill-grace} and of the
 * Go client's {@code Lock} ({@code Lease.StopBy}, default G = 5 s). This class has no holder helper
 * that does it for you; a holder does it itself: stop at once when a lost-listener is called or
 * {@link #state()} is {@code preempted}; while {@code state()} is {@code suspect} (ZooKeeper
 * unreachable) or {@code draining}, stop once {@link #validFor()} (draining: also
 * {@link #drainFor()}) is at most G, and go on if it is {@code held} again first; when the sidecar
 * does not answer ({@link UnavailableException}, a timeout), stop once {@code validFor()} is at most
 * G. No listener is called for a state change: check {@code state()} and {@code validFor()} before
 * each write and from a timer while one runs. See the README, "Stop by".
 *
 * <p>Methods are safe for concurrent use.
 */
public final class Lease implements AutoCloseable {
    /** How long one loss long-poll waits before it is renewed. */
    static final long LONG_POLL_MS = 30_000;

    private final BatonClient c;
    private final String id;
    private final String object;
    private final String type;
    private final String info;
    private final String node;
    private final String mode;
    private final long token;
    private final String acquiredAt;
    private final long waitedMillis;
    private final long lengthMillis;

    private final Object mu = new Object();
    private Map<String, Object> last;
    private long lastSent;
    private long validUntil; // System.nanoTime(): send time + valid_for_ms
    private long drainUntil; // System.nanoTime(): send time + drain_for_ms, while draining
    private boolean draining;
    private LockLostException lost;
    private boolean released;
    private final List<Consumer<? super LockLostException>> listeners = new ArrayList<>();

    private volatile boolean stopped;
    private Thread keeper;
    private Thread watcher;

    Lease(BatonClient c, Map<String, Object> v, long sent, long lengthMillis) {
        this.c = c;
        this.id = Json.str(v, "lease_id");
        this.object = Json.str(v, "object");
        this.type = Json.str(v, "type");
        this.info = Json.str(v, "info");
        this.node = Json.str(v, "node");
        String m = Json.str(v, "mode");
        this.mode = m.isEmpty() ? AcquireOptions.EXCLUSIVE : m;
        this.token = Json.num(v, "token", 0);
        this.acquiredAt = Json.str(v, "acquired_at");
        this.waitedMillis = Json.num(v, "waited_ms", 0);
        if (lengthMillis <= 0) {
            lengthMillis = millisBetween(acquiredAt, Json.str(v, "lease_expires_at"));
        }
        this.lengthMillis = lengthMillis > 0 ? lengthMillis : 30_000;
        this.lastSent = sent;
        apply(v, sent);
    }

    private static long millisBetween(String a, String b) {
        try {
            return Duration.between(java.time.Instant.parse(a), java.time.Instant.parse(b)).toMillis();
        } catch (RuntimeException e) {
            return 0;
        }
    }

    /** The lease id (the capability to renew and release it). */
    public String id() {
        return id;
    }

    /** The locked monitor object. */
    public String object() {
        return object;
    }

    /** {@code foreground} or {@code background}. */
    public String type() {
        return type;
    }

    public String info() {
        return info;
    }

    /** The name of the lock's node in ZooKeeper ({@code A-0000000007}). */
    public String node() {
        return node;
    }

    /** {@code exclusive} or {@code shared} (see {@link AcquireOptions#shared}). */
    public String mode() {
        return mode;
    }

    /** The fencing token: strictly greater than every earlier grant's for this object. */
    public long token() {
        return token;
    }

    /** RFC 3339 time of the grant. */
    public String acquiredAt() {
        return acquiredAt;
    }

    /** How long the acquire waited, in milliseconds. */
    public long waitedMillis() {
        return waitedMillis;
    }

    /** The lease length it is renewed to, in milliseconds. */
    public long lengthMillis() {
        return lengthMillis;
    }

    /**
     * The state of the latest answer: {@code held}, {@code suspect} (ZooKeeper disconnected: validity
     * shrinks), {@code lost}, {@code released}, or a state this client does not know yet (e.g.
     * {@code draining}); only {@code lost} and {@code released} end a lease.
     */
    public String state() {
        synchronized (mu) {
            return Json.str(last, "state");
        }
    }

    /** A member of the latest lease answer, as parsed JSON (also members this client does not know). */
    public Object answerMember(String name) {
        synchronized (mu) {
            return last.get(name);
        }
    }

    /** How long the lock is still certainly valid; zero once lost or released. */
    public Duration validFor() {
        synchronized (mu) {
            if (lost != null || released) return Duration.ZERO;
            return Duration.ofNanos(Math.max(0, validUntil - System.nanoTime()));
        }
    }

    /**
     * While the sidecar drains (it is shutting down: state {@code draining}), how long until the end of
     * its grace, past which no renewal extends the validity: finish and release before it. Empty
     * when the sidecar is not draining.
     */
    public java.util.Optional<Duration> drainFor() {
        synchronized (mu) {
            if (!draining) return java.util.Optional.empty();
            return java.util.Optional.of(Duration.ofNanos(Math.max(0, drainUntil - System.nanoTime())));
        }
    }

    /** True while neither lost nor released, and validity remains. */
    public boolean isHeld() {
        return !validFor().isZero();
    }

    /** The loss, or null while not lost. */
    public LockLostException lostCause() {
        synchronized (mu) {
            return lost;
        }
    }

    /**
     * Calls listener once when the lock is lost (at once, on this thread, if it already is).
     * Listeners run on the thread that learned of the loss; they must not block for long.
     */
    public void addLostListener(Consumer<? super LockLostException> listener) {
        LockLostException now;
        synchronized (mu) {
            now = lost;
            if (now == null) {
                listeners.add(listener);
                return;
            }
        }
        listener.accept(now);
    }

    /** Records an answer about the lease, requested at sent (nanoTime). */
    void apply(Map<String, Object> v, long sent) {
        synchronized (mu) {
            if (last == null || sent - lastSent >= 0) {
                last = v;
                lastSent = sent;
                validUntil = sent + Json.num(v, "valid_for_ms", 0) * 1_000_000L;
                drainUntil = v.get("drain_ends_at") != null ? sent + Json.num(v, "drain_for_ms", 0) * 1_000_000L : 0;
                draining = v.get("drain_ends_at") != null;
            }
        }
        String state = Json.str(v, "state");
        if (state.equals("lost")) {
            String reason = Json.str(v, "reason");
            if (reason.isEmpty()) reason = "lost";
            markLost(new LockLostException(0, "lease on \"" + object + "\" (token " + token + ") is lost: " + reason, reason, null));
        } else if (state.equals("released")) {
            markLost(new LockLostException(0, "lease on \"" + object + "\" (token " + token + ") was released", "released", null));
        }
    }

    void markLost(LockLostException e) {
        List<Consumer<? super LockLostException>> ls;
        synchronized (mu) {
            if (lost != null || released) return;
            lost = e;
            ls = new ArrayList<>(listeners);
            listeners.clear();
        }
        stopped = true;
        Thread self = Thread.currentThread();
        for (Thread t : threads()) {
            if (t != null && t != self) t.interrupt();
        }
        for (Consumer<? super LockLostException> l : ls) {
            try {
                l.accept(e);
            } catch (RuntimeException ex) {
                self.getUncaughtExceptionHandler().uncaughtException(self, ex);
            }
        }
    }

    private Thread[] threads() {
        synchronized (mu) {
            return new Thread[] {keeper, watcher};
        }
    }

    void startBackground() {
        Thread k = new Thread(this::keep, "baton-renew-" + object);
        Thread w = new Thread(this::watch, "baton-watch-" + object);
        k.setDaemon(true);
        w.setDaemon(true);
        synchronized (mu) {
            keeper = k;
            watcher = w;
        }
        k.start();
        w.start();
    }

    /** Stops renewal and the loss watch, and waits for them. */
    void stopBackground() {
        stopped = true;
        Thread self = Thread.currentThread();
        for (Thread t : threads()) {
            if (t == null || t == self) continue;
            t.interrupt();
            boolean interrupted = false;
            while (true) {
                try {
                    t.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) self.interrupt();
        }
        c.forget(this);
    }

    /**
     * Extends the lease (to the length it was acquired with) and refreshes its validity. A lost lease
     * throws LockLostException (and the listeners are told).
     */
    public void renew() throws IOException {
        renew(BatonClient.REQUEST_TIMEOUT_MS);
    }

    private void renew(long timeoutMs) throws IOException {
        long sent = System.nanoTime();
        UnixHttp.Response r = c.send("POST", "/v1/leases/" + BatonClient.escape(id) + "/renew", "{}", timeoutMs);
        if (r.status() >= 300) {
            BatonException e = BatonClient.error(r);
            if (e instanceof LockLostException le) {
                markLost(le);
            } else if (e instanceof NoSuchLeaseException) {
                markLost(new LockLostException(404, e.getMessage(), "released", e));
            }
            throw e;
        }
        apply(BatonClient.answer(r), sent);
        LockLostException l = lostCause();
        if (l != null) throw l;
    }

    /**
     * Stops the background renewal and releases the lock. Throws LockLostException if the lock was
     * lost before (the holder's writes may not all have been exclusive), NoSuchLeaseException if it
     * was already released.
     */
    public void release() throws IOException {
        release("");
    }

    /**
     * {@link #release()} in the sidecar's answer-first mode ({@code DELETE ?wait=false}): it returns
     * before ZooKeeper has the release's write. The lease has ended when it returns; the lock is
     * freed when that write lands, and nobody is granted it before (an acquire of the same object
     * through the same sidecar is granted after it).
     */
    public void releaseNoWait() throws IOException {
        release("?wait=false");
    }

    private void release(String query) throws IOException {
        stopBackground();
        UnixHttp.Response r;
        try {
            r = c.send("DELETE", "/v1/leases/" + BatonClient.escape(id) + query, null, BatonClient.REQUEST_TIMEOUT_MS);
        } catch (IOException e) {
            LockLostException l = lostCause();
            if (l != null) throw l; // the loss says more than the failed release
            throw e;
        }
        if (r.status() >= 300) {
            BatonException e = BatonClient.error(r);
            if (e instanceof LockLostException le) {
                markLost(le);
                throw lostCause();
            }
            LockLostException l = lostCause();
            if (l != null) throw l;
            throw e;
        }
        LockLostException l;
        synchronized (mu) {
            l = lost;
            if (l == null) released = true;
        }
        if (l != null) throw l;
    }

    /** {@link #release()}: {@code try (Lease l = client.acquire(...)) { ... }}. */
    @Override
    public void close() throws IOException {
        synchronized (mu) {
            if (released) return;
        }
        release();
    }

    private long leftNanos() {
        synchronized (mu) {
            return validUntil - System.nanoTime();
        }
    }

    /** Renews at a third of the lease, and at half of the validity left. */
    private void keep() {
        while (!stopped) {
            long left = leftNanos();
            if (left <= 0) {
                markLost(new LockLostException(0, "lease on \"" + object + "\" (token " + token
                        + "): validity ran out without a confirmation from the sidecar", "validity ran out", null));
                return;
            }
            long next = Math.max(Math.min(lengthMillis * 1_000_000L / 3, left / 2), 20_000_000L);
            next = Math.min(next, left);
            try {
                Thread.sleep(next / 1_000_000L, (int) (next % 1_000_000L));
            } catch (InterruptedException e) {
                return;
            }
            if (stopped) return;
            left = leftNanos();
            if (left <= 0) continue; // reported as lost above
            try {
                // bounded by the validity left, so an unanswered renewal never delays the loss report
                renew(Math.max(left / 1_000_000L, 1));
            } catch (LockLostException | NoSuchLeaseException e) {
                return; // markLost done by renew
            } catch (InterruptedIOException e) {
                if (stopped) return;
                // timed out: retry at half the remaining validity
            } catch (IOException e) {
                // sidecar unreachable or busy: retry at half the remaining validity
            }
        }
    }

    /** Long-polls the sidecar for the lease leaving "held". */
    private void watch() {
        String base = "/v1/leases/" + BatonClient.escape(id) + "?wait=lost&timeout_ms=" + LONG_POLL_MS;
        while (!stopped) {
            // The state last seen: a change since (a drain begun between two polls) is answered at once.
            String seen = state();
            String path = switch (seen) {
                case "held", "suspect", "draining", "preempted" -> base + "&state=" + seen;
                default -> base;
            };
            long sent = System.nanoTime();
            long pause = 20;
            try {
                UnixHttp.Response r = c.send("GET", path, null, LONG_POLL_MS + BatonClient.ANSWER_MARGIN_MS);
                if (stopped) return;
                if (r.status() >= 300) {
                    BatonException e = BatonClient.error(r);
                    if (e instanceof LockLostException le) {
                        markLost(le);
                        return;
                    }
                    if (e instanceof NoSuchLeaseException) {
                        markLost(new LockLostException(404, e.getMessage(), "released", e));
                        return;
                    }
                    pause = 250;
                } else {
                    apply(BatonClient.answer(r), sent);
                }
            } catch (IOException e) {
                if (stopped) return;
                pause = 250;
            }
            try {
                Thread.sleep(pause); // a guard against a hot loop
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /**
     * Object, type, token and node, for logs. Never the lease id: it is the capability to renew,
     * re-enter and release the lock, and must not end up in a log line.
     */
    @Override
    public String toString() {
        return "Lease[" + object + " " + type + " token=" + token + " node=" + node + "]";
    }
}
