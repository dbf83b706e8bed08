package com.batonhq.baton;

/**
 * The answer to {@link BatonClient#submit} and {@link BatonClient#replay}.
 *
 * @param id        the op id (given or generated)
 * @param state     {@code queued}, {@code running}, {@code done}, ... (unknown states are passed through)
 * @param duplicate the id was known with the same body: nothing new was queued
 */
public record OpAck(String id, String state, boolean duplicate) {}
