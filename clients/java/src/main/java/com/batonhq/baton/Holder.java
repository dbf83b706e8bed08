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
 */
public record Holder(String node, String type, String info, String sidecar, long token, String since) {
    static Holder from(Map<String, Object> m) {
        if (m == null) return null;
        return new Holder(Json.str(m, "node"), Json.str(m, "type"), Json.str(m, "info"), Json.str(m, "sidecar"),
                Json.num(m, "token", 0), Json.str(m, "since"));
    }
}
