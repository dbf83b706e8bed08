package com.batonhq.baton;

/**
 * A background operation's state ({@code GET /v1/ops/{id}}).
 *
 * @param state one of {@code queued running retrying done dlq_pending dead_lettered} (unknown
 *              states are passed through)
 */
public record Op(String id, String object, String state, int attempts, String lastError, String nextAttemptAt,
        String acceptedAt, long seq) {}
