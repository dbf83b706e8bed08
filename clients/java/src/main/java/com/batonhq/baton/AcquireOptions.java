package com.batonhq.baton;

import java.time.Duration;
import java.util.Objects;

/**
 * How to acquire: type (foreground by default), info recorded in the lock's node, how long to wait
 * (default: the sidecar's {@code zookeeper.<type>.task.timeout}), lease length (default: the
 * sidecar's {@code sidecar.lease.default}), whether the lease is renewed in the background (default
 * yes). A mutable builder; {@link BatonClient#acquire} copies what it needs.
 */
public final class AcquireOptions {
    LockTypes type = LockTypes.FOREGROUND_LOCK;
    String info = "";
    Duration wait;
    Duration lease;
    boolean renew = true;
    Boolean bindProcess;
    Duration lockDelay;
    boolean shared;

    /** The mode of an exclusive lock (the default), as the sidecar names it. */
    public static final String EXCLUSIVE = "exclusive";
    /** The mode of a shared (read) lock, as the sidecar names it. */
    public static final String SHARED = "shared";

    /** Foreground, no info, the sidecar's defaults, renewed in the background. */
    public static AcquireOptions defaults() {
        return new AcquireOptions();
    }

    public AcquireOptions type(LockTypes t) {
        this.type = Objects.requireNonNull(t, "type");
        return this;
    }

    /** Recorded in the lock's node for inspection (at most 4 KiB). */
    public AcquireOptions info(String info) {
        this.info = info == null ? "" : info;
        return this;
    }

    /**
     * Bounds the wait (at most 10 minutes); {@code Duration.ZERO} tries once: granted only if first
     * in line and free at once. Rounded up to whole milliseconds. null = the type's timeout from the
     * sidecar's properties.
     */
    public AcquireOptions maxWait(Duration d) {
        if (d != null && d.isNegative()) throw new IllegalArgumentException("wait: negative");
        this.wait = d;
        return this;
    }

    /** The lease length: the lock is released if not renewed within it. null = the sidecar's default. */
    public AcquireOptions lease(Duration d) {
        if (d != null && (d.isNegative() || d.isZero())) throw new IllegalArgumentException("lease: must be positive");
        this.lease = d;
        return this;
    }

    /** Whether the lease is renewed and watched for loss in the background (default true). */
    public AcquireOptions renew(boolean on) {
        this.renew = on;
        return this;
    }

    /**
     * Whether to send {@code "bind":"process"}: the sidecar releases the lease as soon as this JVM
     * exits. Default: sent when the sidecar's API has it (see README).
     */
    public AcquireOptions bindToProcess(boolean on) {
        this.bindProcess = on;
        return this;
    }

    /**
     * Lock-delay for this request ({@code lock_delay_ms}, at most 10 minutes): when the previous
     * holder vanished without releasing (its sidecar was killed, its ZooKeeper session expired), the
     * lock is not granted until this long after the request saw the holder gone; a clean release is
     * not delayed. {@code Duration.ZERO} turns it off for this request; null = the sidecar's
     * {@code zookeeper.lock.delay}.
     */
    public AcquireOptions lockDelay(Duration d) {
        if (d != null && d.isNegative()) throw new IllegalArgumentException("lockDelay: negative");
        this.lockDelay = d;
        return this;
    }

    /**
     * A shared (read) lock ({@code "mode":"shared"}): any number of shared holders together, none with
     * an exclusive one; requests are served in line (foreground first, then by arrival), so a waiting
     * exclusive request is not starved by later shared ones. The sidecar must run {@code
     * zookeeper.lock.protocol=native}: a plugin-protocol sidecar refuses it (a {@link BatonException}
     * with status 409 and kind {@code SharedNeedsNative}). With {@link BatonClient#acquireAll} every
     * object is taken shared; a semaphore refuses it. Default false (exclusive).
     */
    public AcquireOptions shared(boolean on) {
        this.shared = on;
        return this;
    }

    static long ceilMillis(Duration d) {
        long ms = d.toMillis();
        if (Duration.ofMillis(ms).compareTo(d) < 0) ms++;
        return ms;
    }
}
