package com.batonhq.baton;

import java.util.List;

/**
 * An object's holder and waiters, cluster-wide, in grant order.
 *
 * @param holder  null when the object is free; with shared holders, the first of holders
 * @param waiters never null; their {@code token} is 0
 * @param holders every holder in grant order (several only when shared); never null
 * @param parked  the answering sidecar's acquires parked behind its holder of the object (native
 *                protocol): waiting in that sidecar, not yet in ZooKeeper, so not in {@code waiters};
 *                0 when none
 */
public record LockStatus(String object, Holder holder, List<Holder> waiters, List<Holder> holders, int parked) {}
