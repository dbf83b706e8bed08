package com.batonhq.baton;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A client of one Baton sidecar over its unix socket (HTTP/1.1, JSON). Safe for concurrent use.
 *
 * <pre>{@code
 * BatonClient c = new BatonClient("/run/baton/baton.sock");
 * try (Lease l = c.acquire("article-42", AcquireOptions.defaults().info("save article"))) {
 *     saveArticle(l.token());              // the fencing token goes with every write
 * }
 * }</pre>
 */
public final class BatonClient implements AutoCloseable {
    /** The sidecar's default socket ({@code sidecar.socket.path}). */
    public static final String DEFAULT_SOCKET = "/run/baton/baton.sock";

    /** The largest wait an acquire may ask for (10 minutes). */
    public static final long MAX_WAIT_MS = 600_000;

    /** Time given to an answer beyond the wait the request itself asks for. */
    static final long ANSWER_MARGIN_MS = 30_000;

    /** Time given to a request that does not wait (renew, release, inspect, ops). */
    static final long REQUEST_TIMEOUT_MS = 10_000;

    /**
     * Whether acquires send {@code "bind":"process"} unless {@link AcquireOptions#bindToProcess} says
     * otherwise (as the Go client and {@code baton lock} always do): the sidecar releases the lease at
     * once when this JVM exits.
     */
    static final boolean BIND_PROCESS_DEFAULT = true;

    private final UnixHttp http;
    private final Set<Lease> leases = ConcurrentHashMap.newKeySet();

    /** A client of the sidecar listening on socketPath. */
    public BatonClient(String socketPath) {
        this(Path.of(socketPath));
    }

    public BatonClient(Path socketPath) {
        this.http = new UnixHttp(socketPath);
    }

    /**
     * A client of the socket named by the system property {@code baton.socket}, else the environment
     * variable {@code BATON_SOCKET}, else {@code BATON_SIDECAR_SOCKET_PATH} (the sidecar's own key),
     * else {@link #DEFAULT_SOCKET}.
     */
    public static BatonClient fromEnvironment() {
        return new BatonClient(defaultSocket());
    }

    static String defaultSocket() {
        String s = System.getProperty("baton.socket");
        if (s == null || s.isEmpty()) s = System.getenv("BATON_SOCKET");
        if (s == null || s.isEmpty()) s = System.getenv("BATON_SIDECAR_SOCKET_PATH");
        if (s == null || s.isEmpty()) s = DEFAULT_SOCKET;
        return s;
    }

    /** The sidecar's socket. */
    public Path socket() {
        return http.socket();
    }

    /**
     * Stops the background renewal of every lease of this client, without releasing them (they end
     * at their lease expiry, or when this process exits if bound to it), and closes idle connections.
     */
    @Override
    public void close() {
        for (Lease l : new ArrayList<>(leases)) l.stopBackground();
        http.close();
    }

    void forget(Lease l) {
        leases.remove(l);
    }

    /** Acquires a foreground lock on object with the sidecar's default wait and lease. */
    public Lease lock(String object) throws IOException, InstanceLockException, InterruptedException {
        return acquire(object, AcquireOptions.defaults());
    }

    /**
     * Asks for the lock on object and returns its lease, renewed in the background until released
     * (unless {@code renew(false)}). Not granted in time: {@link InstanceLockException}. Interrupting
     * the thread abandons the wait (the sidecar leaves no node behind) with InterruptedException.
     */
    public Lease acquire(String object, AcquireOptions o)
            throws IOException, InstanceLockException, InterruptedException {
        return acquireAt("/v1/locks/" + escape(object) + "/acquire", new LinkedHashMap<>(), o, object);
    }

    /**
     * Asks for the locks of every object of the set, all or nothing, within one wait ({@code POST
     * /v1/locks/acquire}): one lease for the set, one release; the loss of any object is the loss of
     * the lease. Each object has its own fencing token, in the answer's {@code objects} member
     * ({@link Lease#answerMember}): fence each object's writes with ITS token ({@link Lease#token} is
     * the first object's). Not granted in time: {@link InstanceLockException} naming the object it
     * waited for.
     */
    public Lease acquireAll(List<String> objects, AcquireOptions o)
            throws IOException, InstanceLockException, InterruptedException {
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("objects", new ArrayList<Object>(objects));
        return acquireAt("/v1/locks/acquire", req, o, String.join(", ", objects));
    }

    /**
     * Takes one of the permits of the counting semaphore name ({@code POST
     * /v1/semaphores/{name}/acquire}): at most permits holders at once, across every sidecar, among
     * requests giving the same permits. The lease is an ordinary lease of the permit's lock object,
     * with its own token; the answer's {@code permit} member ({@link Lease#answerMember}) is the
     * permit held, from 0.
     */
    public Lease acquirePermit(String name, int permits, AcquireOptions o)
            throws IOException, InstanceLockException, InterruptedException {
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("permits", (long) permits);
        return acquireAt("/v1/semaphores/" + escape(name) + "/acquire", req, o, "semaphore " + name);
    }

    private Lease acquireAt(String path, Map<String, Object> req, AcquireOptions o, String object)
            throws IOException, InstanceLockException, InterruptedException {
        req.put("type", o.type.getValue());
        if (!o.info.isEmpty()) req.put("info", o.info);
        long timeout = MAX_WAIT_MS + ANSWER_MARGIN_MS;
        if (o.wait != null) {
            long ms = AcquireOptions.ceilMillis(o.wait);
            req.put("wait_ms", ms);
            timeout = ms + ANSWER_MARGIN_MS;
        }
        if (o.lease != null) req.put("lease_ms", AcquireOptions.ceilMillis(o.lease));
        if (o.lockDelay != null) req.put("lock_delay_ms", AcquireOptions.ceilMillis(o.lockDelay));
        if (o.shared) req.put("mode", AcquireOptions.SHARED);
        if (o.bindProcess != null ? o.bindProcess : BIND_PROCESS_DEFAULT) req.put("bind", "process");
        long sent = System.nanoTime();
        UnixHttp.Response r;
        try {
            r = send("POST", path, Json.write(req), timeout);
        } catch (InterruptedIOException e) {
            if (!(e instanceof SocketTimeoutException)) {
                Thread.interrupted();
                InterruptedException ie = new InterruptedException("acquire of " + object + " interrupted");
                ie.initCause(e);
                throw ie;
            }
            throw e;
        }
        if (r.status() == 423) {
            Map<String, Object> m = parseError(r);
            throw new InstanceLockException(Json.str(m, "message"), Json.str(m, "object"), Json.str(m, "type"),
                    Json.num(m, "waited_ms", 0), Holder.from(Json.obj(m, "holder")), (int) Json.num(m, "position", 0));
        }
        check(r);
        Map<String, Object> v = answer(r);
        long length = o.lease != null ? AcquireOptions.ceilMillis(o.lease) : 0;
        // The sidecar granted no earlier than sent + waited_ms (it began waiting after the request was
        // sent, and rounds waited down) and counted valid_for_ms from the grant or later: a lower bound
        // of its valid_until that a long wait does not eat into.
        sent += Math.max(0, Json.num(v, "waited_ms", 0)) * 1_000_000L;
        Lease l = new Lease(this, v, sent, length);
        if (o.renew) {
            leases.add(l);
            l.startBackground();
        }
        return l;
    }

    /**
     * The object's holder and waiters, cluster-wide, in grant order ({@code GET /v1/locks/{object}}).
     */
    public LockStatus inspect(String object) throws IOException {
        Map<String, Object> v = answer(check(send("GET", "/v1/locks/" + escape(object), null, REQUEST_TIMEOUT_MS)));
        return lockStatus(v);
    }

    /**
     * Waits for a change of the object's holder or queue ({@code GET /v1/locks/{object}?wait=change},
     * etcd's Election.Observe): with version null or empty the current state at once; with the
     * version of an earlier answer the state after it, waiting up to timeoutMs (at most 600000) for
     * one, else the current state with {@code changed() == false}. Passing each answer's version
     * back, a caller sees every state the sidecar saw, in order. Every watch of an object through
     * one sidecar shares one ZooKeeper watch.
     */
    public LockWatch waitChange(String object, String version, long timeoutMs) throws IOException {
        if (timeoutMs < 0 || timeoutMs > MAX_WAIT_MS) {
            throw new IllegalArgumentException("timeoutMs " + timeoutMs + " is not between 0 and " + MAX_WAIT_MS);
        }
        String q = "?wait=change&timeout_ms=" + timeoutMs;
        if (version != null && !version.isEmpty()) q += "&version=" + escape(version);
        Map<String, Object> v = answer(check(send("GET", "/v1/locks/" + escape(object) + q, null, timeoutMs + REQUEST_TIMEOUT_MS)));
        return new LockWatch(lockStatus(v), Json.str(v, "version"), Json.bool(v, "changed"));
    }

    private static LockStatus lockStatus(Map<String, Object> v) {
        Holder holder = Holder.from(Json.obj(v, "holder"));
        List<Holder> holders = holders(v.get("holders"));
        if (holders.isEmpty() && holder != null) holders = List.of(holder); // a sidecar older than shared locks
        return new LockStatus(Json.str(v, "object"), holder, holders(v.get("waiters")), holders,
                (int) Json.num(v, "parked", 0));
    }

    private static List<Holder> holders(Object list) {
        List<Holder> out = new ArrayList<>();
        if (list instanceof List<?> ws) {
            for (Object w : ws) {
                if (w instanceof Map<?, ?>) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> wm = (Map<String, Object>) w;
                    out.add(Holder.from(wm));
                }
            }
        }
        return List.copyOf(out);
    }

    /** Returns normally when the sidecar is ready (/readyz 200); else an UnavailableException saying why. */
    public void ready() throws IOException {
        check(send("GET", "/readyz", null, REQUEST_TIMEOUT_MS));
    }

    /**
     * Hands a background operation to the sidecar's durable queue: it takes the background lock on
     * object and delivers the op to the app ({@code sidecar.app.url}), retrying and dead-lettering.
     *
     * @param id          idempotency key, or null for a generated one
     * @param payloadJson the payload as a JSON text, or null
     */
    public OpAck submit(String id, String object, String info, String payloadJson) throws IOException {
        Map<String, Object> req = new LinkedHashMap<>();
        if (id != null && !id.isEmpty()) req.put("id", id);
        req.put("object", object);
        if (info != null && !info.isEmpty()) req.put("info", info);
        if (payloadJson != null) {
            Json.parse(payloadJson); // refuse a malformed payload here, naming it
            req.put("payload", new Json.Raw(payloadJson));
        }
        UnixHttp.Response r = check(send("POST", "/v1/ops", Json.write(req), REQUEST_TIMEOUT_MS));
        Map<String, Object> v = answer(r);
        return new OpAck(Json.str(v, "id"), Json.str(v, "state"), r.status() == 200);
    }

    /** A background operation's state. */
    public Op op(String id) throws IOException {
        Map<String, Object> v = answer(check(send("GET", "/v1/ops/" + escape(id), null, REQUEST_TIMEOUT_MS)));
        return new Op(Json.str(v, "id"), Json.str(v, "object"), Json.str(v, "state"), (int) Json.num(v, "attempts", 0),
                Json.str(v, "last_error"), Json.str(v, "next_attempt_at"), Json.str(v, "accepted_at"),
                Json.num(v, "seq", 0));
    }

    /** Queues a dead-lettered operation again. */
    public OpAck replay(String id) throws IOException {
        Map<String, Object> v = answer(check(send("POST", "/v1/ops/" + escape(id) + "/replay", null, REQUEST_TIMEOUT_MS)));
        String got = Json.str(v, "id");
        return new OpAck(got.isEmpty() ? id : got, Json.str(v, "state"), false);
    }

    // --- transport ---

    UnixHttp.Response send(String method, String path, String body, long timeoutMs) throws IOException {
        try {
            return http.exchange(method, path, body, timeoutMs);
        } catch (InterruptedIOException e) {
            throw e; // interrupted or timed out: the caller decides
        } catch (IOException e) {
            throw new UnavailableException(0, "Unreachable",
                    method + " " + logPath(path) + ": sidecar at " + http.socket() + " unreachable: " + e.getMessage(), e);
        }
    }

    /**
     * The path of a request as it may appear in a message (which ends up in logs): the query
     * left out, and a lease id (the capability to renew and release) replaced by {id}.
     */
    static String logPath(String path) {
        return path.replaceFirst("\\?.*", "").replaceFirst("^/v1/leases/[^/]+", "/v1/leases/{id}");
    }

    /** Returns r if 2xx, else throws the error it carries. */
    static UnixHttp.Response check(UnixHttp.Response r) throws BatonException {
        if (r.status() >= 200 && r.status() < 300) return r;
        throw error(r);
    }

    static BatonException error(UnixHttp.Response r) {
        Map<String, Object> m = parseError(r);
        String kind = Json.str(m, "error");
        String msg = Json.str(m, "message");
        if (r.status() == 410 || kind.equals("LockLost")) {
            return new LockLostException(r.status(), msg, Json.str(m, "reason"), null);
        }
        if (kind.equals("NoNode")) return new NoSuchLeaseException(msg);
        if (r.status() == 503 || kind.equals("QueueFull")) return new UnavailableException(r.status(), kind, msg, null); // 507: queue.max.bytes
        return new BatonException(r.status(), kind, msg, Json.str(m, "reason"), Json.str(m, "field"), null);
    }

    private static Map<String, Object> parseError(UnixHttp.Response r) {
        try {
            Map<String, Object> m = Json.parseObject(r.body());
            if (!Json.str(m, "error").isEmpty()) return m;
        } catch (IllegalArgumentException e) {
            // not our error shape
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("error", "HTTP" + r.status());
        String b = r.body().length() > 200 ? r.body().substring(0, 200) + "..." : r.body();
        m.put("message", "unexpected answer: " + b);
        return m;
    }

    static Map<String, Object> answer(UnixHttp.Response r) throws BatonException {
        if (r.body().isBlank()) return new LinkedHashMap<>();
        try {
            return Json.parseObject(r.body());
        } catch (IllegalArgumentException e) {
            throw new BatonException(r.status(), "BadAnswer", "decoding the answer: " + e.getMessage(), "", "", e);
        }
    }

    /** Percent-encodes one path segment (UTF-8); "." and ".." are encoded so they are never path steps. */
    static String escape(String seg) {
        StringBuilder b = new StringBuilder();
        boolean dots = !seg.isEmpty() && seg.chars().allMatch(c -> c == '.');
        for (byte x : seg.getBytes(StandardCharsets.UTF_8)) {
            int c = x & 0xff;
            boolean plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                    || c == '-' || c == '_' || c == '~' || (c == '.' && !dots);
            if (plain) {
                b.append((char) c);
            } else {
                b.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
            }
        }
        return b.toString();
    }
}
