package com.batonhq.baton;

/**
 * The sidecar cannot be reached (status 0: socket missing, refused, closed, no answer in time), or
 * it answered 503 ({@code ZooKeeperUnavailable}, {@code ShuttingDown}, {@code TooManyWaiters},
 * {@code QueueUnavailable}, {@code QueueFull}, {@code OpsDisabled}), or 507 {@code QueueFull} (queue.max.bytes).
 */
public class UnavailableException extends BatonException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(int status, String kind, String message, Throwable cause) {
        super(status, kind, message, "", "", cause);
    }
}
