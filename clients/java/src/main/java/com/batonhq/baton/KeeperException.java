package com.batonhq.baton;

/**
 * The ZooKeeper failures the plugin's {@code lock()} and {@code lockWithTimeout()} declared, with
 * the names of {@code org.apache.zookeeper.KeeperException}'s subclasses, so code written against
 * the plugin compiles and its {@code catch} blocks keep their meaning without the ZooKeeper jar:
 * the sidecar or its ZooKeeper session unreachable is {@link ConnectionLossException}, a lock lost
 * is {@link SessionExpiredException}, a lease already gone is {@link NoNodeException}, a request
 * the sidecar refuses is {@link BadArgumentsException}.
 */
public abstract class KeeperException extends Exception {
    private static final long serialVersionUID = 1L;

    /** The failure codes, named as ZooKeeper's. */
    public enum Code { SYSTEMERROR, CONNECTIONLOSS, BADARGUMENTS, NONODE, SESSIONEXPIRED }

    private final Code code;
    private final String path;

    protected KeeperException(Code code, String path, String message, Throwable cause) {
        super(message, cause);
        this.code = code;
        this.path = path;
    }

    public Code code() {
        return code;
    }

    /** The monitor object concerned. */
    public String getPath() {
        return path;
    }

    @Override
    public String getMessage() {
        return "KeeperErrorCode = " + code + " for " + path + ": " + super.getMessage();
    }

    /** The sidecar, or its ZooKeeper session, is unreachable. */
    public static class ConnectionLossException extends KeeperException {
        private static final long serialVersionUID = 1L;

        public ConnectionLossException(String path, String message, Throwable cause) {
            super(Code.CONNECTIONLOSS, path, message, cause);
        }
    }

    /** The lock was lost (session expired, lease expired, node deleted, sidecar restarted). */
    public static class SessionExpiredException extends KeeperException {
        private static final long serialVersionUID = 1L;

        public SessionExpiredException(String path, String message, Throwable cause) {
            super(Code.SESSIONEXPIRED, path, message, cause);
        }
    }

    /** The lease (the lock node) is already gone. */
    public static class NoNodeException extends KeeperException {
        private static final long serialVersionUID = 1L;

        public NoNodeException(String path, String message, Throwable cause) {
            super(Code.NONODE, path, message, cause);
        }
    }

    /** The sidecar refused the request (400: bad object name, bad info). */
    public static class BadArgumentsException extends KeeperException {
        private static final long serialVersionUID = 1L;

        public BadArgumentsException(String path, String message, Throwable cause) {
            super(Code.BADARGUMENTS, path, message, cause);
        }
    }

    /** Any other failure of the sidecar. */
    public static class SystemErrorException extends KeeperException {
        private static final long serialVersionUID = 1L;

        public SystemErrorException(String path, String message, Throwable cause) {
            super(Code.SYSTEMERROR, path, message, cause);
        }
    }
}
