package com.batonhq.baton;

/** 404 {@code NoNode}: the lease was never granted, or is already released. */
public class NoSuchLeaseException extends BatonException {
    private static final long serialVersionUID = 1L;

    public NoSuchLeaseException(String message) {
        super(404, "NoNode", message, "", "", null);
    }
}
