package com.batonhq.baton;

import java.io.IOException;

/**
 * An error answer of the sidecar ({@code {"error":Kind,"message":...}}), or a failure to reach it.
 * Subclasses: {@link LockLostException} (410), {@link NoSuchLeaseException} (404 NoNode),
 * {@link UnavailableException} (503, or the socket cannot be used).
 */
public class BatonException extends IOException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String kind;
    private final String reason;
    private final String field;

    /** status 0 = no HTTP answer; kind is the answer's {@code error} member. */
    public BatonException(int status, String kind, String message, String reason, String field, Throwable cause) {
        super(message, cause);
        this.status = status;
        this.kind = kind == null ? "" : kind;
        this.reason = reason == null ? "" : reason;
        this.field = field == null ? "" : field;
    }

    /** The HTTP status, 0 when there was no answer. */
    public int status() {
        return status;
    }

    /** The error kind ({@code BadRequest}, {@code LockLost}, {@code ZooKeeperUnavailable}, ...). */
    public String kind() {
        return kind;
    }

    /** Why a lease is lost ({@code LockLost}); empty otherwise. */
    public String reason() {
        return reason;
    }

    /** The request field or parameter at fault ({@code BadRequest}); empty otherwise. */
    public String field() {
        return field;
    }

    @Override
    public String getMessage() {
        String m = "baton: " + (status > 0 ? status + " " : "") + kind + ": " + super.getMessage();
        if (!reason.isEmpty()) m += " (reason: " + reason + ")";
        return m;
    }
}
