package com.batonhq.baton;

/**
 * Lock types, named as in the original plugin ({@code WriteLock.LockTypes}). Every foreground
 * request is granted before every background one that waits for the same object.
 */
public enum LockTypes {
    /** Work a user or a synchronous call waits for; served first. */
    FOREGROUND_LOCK("FOREGROUND_LOCK", "foreground"),
    /** Deferred work. */
    BACKGROUND_LOCK("BACKGROUND_LOCK", "background");

    private final String key;
    private final String value;

    LockTypes(String key, String value) {
        this.key = key;
        this.value = value;
    }

    /** The constant's name, as the plugin's {@code getKey()}. */
    public String getKey() {
        return key;
    }

    /**
     * The API's name of the type ({@code foreground} / {@code background}). The plugin returned
     * the node-name prefix here; with Baton the prefixes are the sidecar's properties
     * ({@code zookeeper.foreground.lock.prefix}), not the client's.
     */
    public String getValue() {
        return value;
    }

    /** The type of an API name; null for an unknown one. */
    public static LockTypes fromValue(String v) {
        for (LockTypes t : values()) {
            if (t.value.equals(v)) return t;
        }
        return null;
    }
}
