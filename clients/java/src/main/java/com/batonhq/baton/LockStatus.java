package com.batonhq.baton;

import java.util.List;

/**
 * An object's holder and waiters, cluster-wide, in grant order.
 *
 * @param holder  null when the object is free; with shared holders, the first of holders
 * @param waiters never null; their {@code token} is 0
 * @param holders every holder in grant order (several only when shared); never null
 */
public record LockStatus(String object, Holder holder, List<Holder> waiters, List<Holder> holders) {}
