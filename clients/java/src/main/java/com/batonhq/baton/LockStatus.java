package com.batonhq.baton;

import java.util.List;

/**
 * An object's holder and waiters, cluster-wide, in grant order.
 *
 * @param holder  null when the object is free
 * @param waiters never null; their {@code token} is 0
 */
public record LockStatus(String object, Holder holder, List<Holder> waiters) {}
