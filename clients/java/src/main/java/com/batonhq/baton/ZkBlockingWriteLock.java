package com.batonhq.baton;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The original Elasticsearch plugin's lock, kept source-compatible, taken through the local Baton
 * sidecar: code written against the plugin compiles with its imports of {@code ZkBlockingWriteLock},
 * {@code LockTypes}, {@code InstanceLockException} and {@code KeeperException} replaced by
 * {@code import com.batonhq.baton.*;}.
 *
 * <pre>{@code
 * ZkBlockingWriteLock writeCall = new ZkBlockingWriteLock("Save Content", zk, monitorObject);
 * writeCall.lockWithTimeout();   // InstanceLockException when not granted in time
 * try { ... modify the monitor object ... } finally { writeCall.unlock(); }
 * }</pre>
 *
 * <p>The {@code zk} argument is accepted and ignored (pass the plugin's ZooKeeper handle, null, or
 * a {@link BatonClient} to choose the sidecar); without a BatonClient the sidecar is found by
 * {@link BatonClient#fromEnvironment()}. The ACL argument is ignored: the sidecar applies
 * {@code zookeeper.auth.digest}. {@code lockWithTimeout()} waits the type's timeout from the
 * sidecar's properties ({@code zookeeper.foreground.task.timeout} / {@code background}) as the
 * plugin did from its own. While held, the lease is renewed in the background and watched for loss
 * (see {@link #addLostListener}, {@link #validFor()}, {@link #getFencingToken()}), which the plugin
 * could not do.
 */
public class ZkBlockingWriteLock {
    private static volatile BatonClient shared;

    private final String lockInfo;
    private final String lockName;
    private final LockTypes lockType;
    private final BatonClient client;
    private final Object mu = new Object();
    private Lease lease;

    public ZkBlockingWriteLock(String lockInfo, Object zooKeeper, String lockName) {
        this(lockInfo, zooKeeper, lockName, LockTypes.FOREGROUND_LOCK);
    }

    public ZkBlockingWriteLock(String lockInfo, Object zooKeeper, String lockName, LockTypes lockType) {
        this(lockInfo, zooKeeper, lockName, lockType, null);
    }

    /** The plugin's constructor with an ACL list; the ACLs are ignored. */
    public ZkBlockingWriteLock(String lockInfo, Object zooKeeper, String lockName, LockTypes lockType, List<?> acl) {
        if (lockName == null || lockName.isEmpty()) throw new IllegalArgumentException("lockName: empty");
        this.lockInfo = lockInfo == null ? "" : lockInfo;
        this.lockName = lockName;
        this.lockType = lockType == null ? LockTypes.FOREGROUND_LOCK : lockType;
        this.client = zooKeeper instanceof BatonClient bc ? bc : sharedClient();
    }

    /** Without the ZooKeeper handle: foreground. */
    public ZkBlockingWriteLock(String lockInfo, String lockName) {
        this(lockInfo, null, lockName, LockTypes.FOREGROUND_LOCK);
    }

    /** Without the ZooKeeper handle. */
    public ZkBlockingWriteLock(String lockInfo, String lockName, LockTypes lockType) {
        this(lockInfo, null, lockName, lockType);
    }

    private static BatonClient sharedClient() {
        BatonClient c = shared;
        if (c == null) {
            synchronized (ZkBlockingWriteLock.class) {
                c = shared;
                if (c == null) shared = c = BatonClient.fromEnvironment();
            }
        }
        return c;
    }

    /**
     * Waits until granted, however long (in rounds of the sidecar's longest wait, 10 minutes).
     */
    public void lock() throws InterruptedException, KeeperException, InstanceLockException {
        while (true) {
            try {
                acquire(Duration.ofMillis(BatonClient.MAX_WAIT_MS));
                return;
            } catch (InstanceLockException e) {
                // not yet: wait another round
            }
        }
    }

    /**
     * Waits the type's timeout from the sidecar's properties; not granted by then:
     * {@link InstanceLockException} with the holder and this request's position in line.
     */
    public void lockWithTimeout() throws InterruptedException, KeeperException, InstanceLockException {
        acquire(null);
    }

    /** Waits at most timeout (rounded up to milliseconds, at most 10 minutes); 0 tries once. */
    public boolean lockWithTimeout(long timeout, TimeUnit unit)
            throws InterruptedException, KeeperException, InstanceLockException {
        acquire(Duration.ofNanos(unit.toNanos(timeout)));
        return true;
    }

    private void acquire(Duration wait) throws InterruptedException, KeeperException, InstanceLockException {
        synchronized (mu) {
            if (lease != null && lease.lostCause() == null) {
                throw new IllegalStateException("lock on " + lockName + " is already held by this object; unlock() first");
            }
        }
        AcquireOptions o = AcquireOptions.defaults().type(lockType).info(lockInfo).maxWait(wait);
        Lease l;
        try {
            l = client.acquire(lockName, o);
        } catch (IOException e) {
            throw keeper(e);
        }
        synchronized (mu) {
            lease = l;
        }
    }

    private KeeperException keeper(IOException e) throws InterruptedException {
        if (e instanceof InterruptedIOException && Thread.interrupted()) {
            InterruptedException ie = new InterruptedException("interrupted");
            ie.initCause(e);
            throw ie;
        }
        if (e instanceof LockLostException) return new KeeperException.SessionExpiredException(lockName, e.getMessage(), e);
        if (e instanceof NoSuchLeaseException) return new KeeperException.NoNodeException(lockName, e.getMessage(), e);
        if (e instanceof UnavailableException || e instanceof InterruptedIOException) {
            return new KeeperException.ConnectionLossException(lockName, e.getMessage(), e);
        }
        if (e instanceof BatonException be && be.status() == 400) {
            return new KeeperException.BadArgumentsException(lockName, e.getMessage(), e);
        }
        return new KeeperException.SystemErrorException(lockName, e.getMessage(), e);
    }

    /**
     * Releases the lock; nothing happens if it is not held (as the plugin, which ignored a node already
     * gone). If the lock was <em>lost</em> while held, the holder is told: a RuntimeException whose
     * cause is a {@link KeeperException.NoNodeException} (the plugin's unlock() threw RuntimeException
     * for ZooKeeper failures). If the sidecar cannot be reached: RuntimeException caused by a
     * {@link KeeperException.ConnectionLossException} (the lease then ends at its expiry).
     */
    public void unlock() {
        Lease l;
        synchronized (mu) {
            l = lease;
            lease = null;
        }
        if (l == null) return;
        try {
            l.release();
        } catch (NoSuchLeaseException e) {
            // already released: the plugin ignored NoNode here too
        } catch (LockLostException e) {
            KeeperException ke = new KeeperException.NoNodeException(lockName, "the lock was lost before unlock ("
                    + e.reason() + "); writes after the loss were not exclusive", e);
            throw new RuntimeException(ke.getMessage(), ke);
        } catch (IOException e) {
            KeeperException ke;
            try {
                ke = keeper(e);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                ke = new KeeperException.ConnectionLossException(lockName, "interrupted", e);
            }
            throw new RuntimeException(ke.getMessage(), ke);
        }
    }

    /** The lock node's name ({@code A-0000000007}) while held, else null (the plugin: the node's id). */
    public String getLockName() {
        Lease l = getLease();
        return l == null ? null : l.node();
    }

    /** The monitor object. */
    public String getMonitorObject() {
        return lockName;
    }

    public LockTypes getLockType() {
        return lockType;
    }

    /** The lease while held (also after a loss, until unlock), else null. */
    public Lease getLease() {
        synchronized (mu) {
            return lease;
        }
    }

    /** The fencing token of the current grant: hand it to the storage with every write. */
    public long getFencingToken() {
        Lease l = getLease();
        if (l == null) throw new IllegalStateException("lock on " + lockName + " is not held");
        return l.token();
    }

    /** How long the lock is still certainly valid; zero when not held or lost. */
    public Duration validFor() {
        Lease l = getLease();
        return l == null ? Duration.ZERO : l.validFor();
    }

    /** Tells listener once when the current grant is lost. */
    public void addLostListener(Consumer<? super LockLostException> listener) {
        Lease l = getLease();
        if (l == null) throw new IllegalStateException("lock on " + lockName + " is not held");
        l.addLostListener(listener);
    }
}
