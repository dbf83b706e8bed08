package com.batonhq.baton;

/**
 * One answer of the watch long-poll ({@code GET /v1/locks/{object}?wait=change}): the object's
 * holder and waiters, the version of that state, and whether it changed from what the caller saw.
 *
 * @param status  the holder and waiters, as {@link BatonClient#inspect} gives them
 * @param version pass it back to {@link BatonClient#waitChange} to wait for the next state
 * @param changed false when the timeout passed with the state still the one the caller saw
 */
public record LockWatch(LockStatus status, String version, boolean changed) {}
