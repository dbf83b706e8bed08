package com.batonhq.baton;

import java.util.Map;

/**
 * The holder of an object as found in ZooKeeper. Nodes Baton did not create (the original
 * plugin's) have an empty type and sidecar.
 *
 * @param node    node name ({@code A-0000000007})
 * @param type    {@code foreground}, {@code background}, or empty
 * @param info    what the holder recorded
 * @param sidecar the holder's sidecar ({@code sidecar.node.id})
 * @param token   the holder's fencing token (0 if unknown)
 * @param since   RFC 3339 time of the grant, or empty
 * @param mode    {@code exclusive} or {@code shared} (a waiter: what it asks for)
 */
public record Holder(String node, String type, String info, String sidecar, long token, String since, String mode) {
    static Holder from(Map<String, Object> m) {
        if (m == null) return null;
        String mode = Json.str(m, "mode");
        return new Holder(Json.str(m, "node"), Json.str(m, "type"), Json.str(m, "info"), Json.str(m, "sidecar"),
                Json.num(m, "token", 0), Json.str(m, "since"), mode.isEmpty() ? AcquireOptions.EXCLUSIVE : mode);
    }

    /** A holder in exclusive mode. */
    public Holder(String node, String type, String info, String sidecar, long token, String since) {
        this(node, type, info, sidecar, token, since, AcquireOptions.EXCLUSIVE);
    }
}
