package com.batonhq.baton;

/**
 * The lock was not granted in time (423 {@code InstanceLockException}); nothing of the attempt
 * remains in ZooKeeper. A checked exception like the plugin's, with its three constructors, plus
 * what the sidecar reports: the holder at the time (null if unknown or free) and the request's
 * position in line (1 = next, 0 = unknown).
 */
public class InstanceLockException extends Exception {
    private static final long serialVersionUID = 1L;

    private final String object;
    private final String type;
    private final long waitedMillis;
    private final Holder holder;
    private final int position;

    public InstanceLockException() {
        this(null, "", "", 0, null, 0);
    }

    public InstanceLockException(String exceptionMessage) {
        this(exceptionMessage, "", "", 0, null, 0);
    }

    public InstanceLockException(Exception e) {
        super(e);
        this.object = "";
        this.type = "";
        this.waitedMillis = 0;
        this.holder = null;
        this.position = 0;
    }

    public InstanceLockException(String message, String object, String type, long waitedMillis, Holder holder,
            int position) {
        super(message);
        this.object = object == null ? "" : object;
        this.type = type == null ? "" : type;
        this.waitedMillis = waitedMillis;
        this.holder = holder;
        this.position = position;
    }

    /** The monitor object asked for. */
    public String getObject() {
        return object;
    }

    /** {@code foreground} or {@code background}. */
    public String getType() {
        return type;
    }

    /** How long the request waited, in milliseconds. */
    public long getWaitedMillis() {
        return waitedMillis;
    }

    /** The holder when the wait ended; null if unknown or free. */
    public Holder getHolder() {
        return holder;
    }

    /** The request's position in line when the wait ended: 1 = next, 0 = unknown. */
    public int getPosition() {
        return position;
    }
}
