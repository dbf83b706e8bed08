package com.batonhq.baton;

/**
 * The lease's lock is lost: the sidecar says so (410 {@code LockLost}, or a lease answer in state
 * {@code lost}; {@link #reason()} says why), or its validity ran out without a confirmation from the
 * sidecar. Writes made after {@link Lease#validFor()} reached zero may overlap another holder's.
 */
public class LockLostException extends BatonException {
    private static final long serialVersionUID = 1L;

    public LockLostException(int status, String message, String reason, Throwable cause) {
        super(status, "LockLost", message, reason, "", cause);
    }
}
