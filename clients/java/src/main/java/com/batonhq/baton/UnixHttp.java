package com.batonhq.baton;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.SocketTimeoutException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.Locale;

/**
 * HTTP/1.1 over a unix-domain socket: one request, one answer, with keep-alive connections
 * kept in a small idle pool. Every exchange has a deadline (non-blocking channel + selector),
 * and interrupting the calling thread abandons it (the connection is closed, which the sidecar
 * sees as the caller going away: an abandoned acquire leaves no node behind).
 */
final class UnixHttp {
    /** An answer: status and body (the whole body, as UTF-8 text). */
    record Response(int status, String body) {}

    static final int MAX_BODY = 16 << 20;
    private static final int MAX_IDLE = 16;

    private final UnixDomainSocketAddress addr;
    private final ArrayDeque<Conn> idle = new ArrayDeque<>();
    private boolean closed;

    UnixHttp(Path socket) {
        this.addr = UnixDomainSocketAddress.of(socket);
    }

    Path socket() {
        return addr.getPath();
    }

    /** Closes the idle connections; in-flight ones close when done. */
    void close() {
        synchronized (idle) {
            closed = true;
            for (Conn c : idle) c.close();
            idle.clear();
        }
    }

    /**
     * Sends a request (body may be null) and returns the answer. Throws SocketTimeoutException
     * when timeoutMillis pass, InterruptedIOException when the thread is interrupted, other
     * IOExceptions when the socket fails.
     */
    Response exchange(String method, String target, String body, long timeoutMillis) throws IOException {
        try {
            return exchange0(method, target, body, timeoutMillis);
        } catch (ClosedByInterruptException e) {
            // an interrupt that reached a channel operation rather than the selector: same meaning
            InterruptedIOException ie = new InterruptedIOException("interrupted");
            ie.initCause(e);
            throw ie;
        }
    }

    /**
     * Sends the request once; on a kept-alive connection found closed, once more on a new one,
     * but only when that cannot repeat it: the request was not written (the write failed), or it
     * is a GET or HEAD. A POST or DELETE written whole and then left without an answer (the
     * sidecar closed the connection) may have been carried out — an acquire granted, an op
     * accepted, a hold released — so it is not re-sent: the EOFException says so. Idle
     * connections the sidecar closed (its idle timeout) are found before use and dropped, so
     * that case sends nothing on them. (java.net.HttpURLConnection re-sends a POST once in that
     * case, sun.net.http.retryPost; this client does not use it.)
     */
    private Response exchange0(String method, String target, String body, long timeoutMillis) throws IOException {
        long deadline = System.nanoTime() + Math.max(1, timeoutMillis) * 1_000_000L;
        byte[] req = request(method, target, body);
        for (int attempt = 0; ; attempt++) {
            Conn c = takeIdle();
            boolean reused = c != null;
            if (c == null) c = Conn.open(addr, deadline);
            boolean ok = false;
            try {
                Response r = c.roundTrip(req, method, deadline);
                ok = true;
                if (c.keepAlive) put(c);
                else c.close();
                return r;
            } catch (StaleException e) {
                boolean repeatable = !e.written || method.equals("GET") || method.equals("HEAD");
                if (reused && attempt == 0 && repeatable) continue; // the sidecar closed an idle connection
                if (!repeatable) {
                    throw new EOFException("sidecar closed the connection before answering " + method + " "
                            + BatonClient.logPath(target)
                            + "; not sent again: it may have been carried out"
                            + " (look before retrying: inspect the lock, or submit ops with an id)");
                }
                throw new EOFException("sidecar closed the connection before answering");
            } finally {
                if (!ok) c.close();
            }
        }
    }

    /** An idle connection still open, or null; closed ones are dropped. */
    private Conn takeIdle() {
        while (true) {
            Conn c;
            synchronized (idle) {
                if (idle.isEmpty()) return null;
                c = idle.pop();
            }
            if (c.open()) return c;
            c.close();
        }
    }

    private void put(Conn c) {
        synchronized (idle) {
            if (closed || idle.size() >= MAX_IDLE) {
                c.close();
            } else {
                idle.push(c);
            }
        }
    }

    private static byte[] request(String method, String target, String body) {
        byte[] b = body == null ? new byte[0] : body.getBytes(StandardCharsets.UTF_8);
        StringBuilder h = new StringBuilder();
        h.append(method).append(' ').append(target).append(" HTTP/1.1\r\n");
        h.append("Host: baton\r\n");
        h.append("User-Agent: baton-java\r\n");
        h.append("Accept: application/json\r\n");
        if (body != null) {
            h.append("Content-Type: application/json\r\n");
        }
        if (body != null || method.equals("POST") || method.equals("PUT")) {
            h.append("Content-Length: ").append(b.length).append("\r\n");
        }
        h.append("\r\n");
        byte[] head = h.toString().getBytes(StandardCharsets.ISO_8859_1);
        byte[] out = new byte[head.length + b.length];
        System.arraycopy(head, 0, out, 0, head.length);
        System.arraycopy(b, 0, out, head.length, b.length);
        return out;
    }

    /** EOF before any byte of an answer on a connection; written: the whole request was sent. */
    private static final class StaleException extends IOException {
        private static final long serialVersionUID = 1L;
        final boolean written;

        StaleException(boolean written) {
            super("connection closed before the answer");
            this.written = written;
        }
    }

    private static final class Conn {
        final SocketChannel ch;
        final Selector sel;
        final ByteBuffer in = ByteBuffer.allocate(16 * 1024);
        boolean keepAlive = true;

        private Conn(SocketChannel ch, Selector sel) {
            this.ch = ch;
            this.sel = sel;
            in.flip(); // empty, ready for reading
        }

        static Conn open(UnixDomainSocketAddress addr, long deadline) throws IOException {
            SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            Selector sel = null;
            try {
                ch.connect(addr); // unix-domain connects complete at once or fail
                ch.configureBlocking(false);
                sel = Selector.open();
                ch.register(sel, 0);
                return new Conn(ch, sel);
            } catch (IOException | RuntimeException e) {
                ch.close();
                if (sel != null) sel.close();
                throw e;
            }
        }

        /**
         * Whether an idle connection is still usable: not closed by the sidecar (a read finds
         * EOF or an error) and with nothing unread on it.
         */
        boolean open() {
            if (in.hasRemaining()) return false;
            ByteBuffer probe = ByteBuffer.allocate(1);
            try {
                return ch.read(probe) == 0; // non-blocking: 0 = open and quiet
            } catch (IOException e) {
                return false;
            }
        }

        void close() {
            try {
                ch.close();
            } catch (IOException ignored) {
                // closing
            }
            try {
                sel.close();
            } catch (IOException ignored) {
                // closing
            }
        }

        private void await(int op, long deadline) throws IOException {
            SelectionKey k = ch.keyFor(sel);
            k.interestOps(op);
            while (true) {
                if (Thread.currentThread().isInterrupted()) {
                    throw new InterruptedIOException("interrupted");
                }
                long left = (deadline - System.nanoTime()) / 1_000_000L;
                if (left <= 0) throw new SocketTimeoutException("no answer from the sidecar in time");
                int n = sel.select(left);
                sel.selectedKeys().clear();
                if (Thread.currentThread().isInterrupted()) {
                    throw new InterruptedIOException("interrupted");
                }
                if (n > 0) return;
            }
        }

        Response roundTrip(byte[] req, String method, long deadline) throws IOException {
            ByteBuffer out = ByteBuffer.wrap(req);
            try {
                while (out.hasRemaining()) {
                    if (ch.write(out) == 0) await(SelectionKey.OP_WRITE, deadline);
                }
            } catch (InterruptedIOException | ClosedByInterruptException e) {
                throw e;
            } catch (IOException e) {
                throw new StaleException(false); // the peer closed it: the request was not read whole
            }
            String status = line(deadline, true);
            String[] parts = status.split(" ", 3);
            if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
                throw new IOException("not an HTTP answer: " + status);
            }
            int code;
            try {
                code = Integer.parseInt(parts[1]);
            } catch (NumberFormatException e) {
                throw new IOException("bad HTTP status line: " + status);
            }
            long length = -1;
            boolean chunked = false;
            keepAlive = !parts[0].equals("HTTP/1.0");
            while (true) {
                String h = line(deadline, false);
                if (h.isEmpty()) break;
                int colon = h.indexOf(':');
                if (colon <= 0) throw new IOException("bad HTTP header: " + h);
                String name = h.substring(0, colon).trim().toLowerCase(Locale.ROOT);
                String value = h.substring(colon + 1).trim();
                switch (name) {
                    case "content-length":
                        try {
                            length = Long.parseLong(value);
                        } catch (NumberFormatException e) {
                            throw new IOException("bad Content-Length: " + value);
                        }
                        break;
                    case "transfer-encoding":
                        chunked = value.toLowerCase(Locale.ROOT).contains("chunked");
                        break;
                    case "connection":
                        if (value.equalsIgnoreCase("close")) keepAlive = false;
                        else if (value.equalsIgnoreCase("keep-alive")) keepAlive = true;
                        break;
                    default:
                }
            }
            ByteArrayOutputStream body = new ByteArrayOutputStream();
            boolean noBody = method.equals("HEAD") || code == 204 || code == 304 || (code >= 100 && code < 200);
            if (noBody) {
                // nothing
            } else if (chunked) {
                while (true) {
                    String sz = line(deadline, false);
                    int semi = sz.indexOf(';');
                    if (semi >= 0) sz = sz.substring(0, semi);
                    long n;
                    try {
                        n = Long.parseLong(sz.trim(), 16);
                    } catch (NumberFormatException e) {
                        throw new IOException("bad chunk size: " + sz);
                    }
                    if (n == 0) {
                        while (!line(deadline, false).isEmpty()) {
                            // trailers
                        }
                        break;
                    }
                    read(body, n, deadline);
                    if (!line(deadline, false).isEmpty()) throw new IOException("bad chunk end");
                }
            } else if (length >= 0) {
                read(body, length, deadline);
            } else {
                keepAlive = false;
                readToEof(body, deadline);
            }
            return new Response(code, body.toString(StandardCharsets.UTF_8));
        }

        /** Fills the input buffer; false at EOF. */
        private boolean fill(long deadline) throws IOException {
            in.compact();
            try {
                while (true) {
                    int n = ch.read(in);
                    if (n < 0) return false;
                    if (n > 0) return true;
                    await(SelectionKey.OP_READ, deadline);
                }
            } finally {
                in.flip();
            }
        }

        private String line(long deadline, boolean first) throws IOException {
            StringBuilder b = new StringBuilder();
            boolean any = false;
            while (true) {
                while (in.hasRemaining()) {
                    any = true;
                    byte c = in.get();
                    if (c == '\n') {
                        int n = b.length();
                        if (n > 0 && b.charAt(n - 1) == '\r') b.setLength(n - 1);
                        return b.toString();
                    }
                    b.append((char) (c & 0xff));
                    if (b.length() > 64 * 1024) throw new IOException("HTTP header line too long");
                }
                boolean more;
                try {
                    more = fill(deadline);
                } catch (InterruptedIOException | ClosedByInterruptException e) {
                    throw e;
                } catch (IOException e) {
                    if (first && !any) throw new StaleException(true); // reset by a peer that had closed it
                    throw e;
                }
                if (!more) {
                    if (first && !any) throw new StaleException(true);
                    throw new EOFException("sidecar closed the connection in the middle of an answer");
                }
            }
        }

        private void read(ByteArrayOutputStream body, long n, long deadline) throws IOException {
            if (body.size() + n > MAX_BODY) throw new IOException("answer body over " + MAX_BODY + " bytes");
            while (n > 0) {
                if (!in.hasRemaining() && !fill(deadline)) {
                    throw new EOFException("sidecar closed the connection in the middle of an answer");
                }
                int k = (int) Math.min(n, in.remaining());
                body.write(in.array(), in.arrayOffset() + in.position(), k);
                in.position(in.position() + k);
                n -= k;
            }
        }

        private void readToEof(ByteArrayOutputStream body, long deadline) throws IOException {
            while (true) {
                if (in.hasRemaining()) {
                    int k = in.remaining();
                    if (body.size() + k > MAX_BODY) throw new IOException("answer body over " + MAX_BODY + " bytes");
                    body.write(in.array(), in.arrayOffset() + in.position(), k);
                    in.position(in.limit());
                }
                if (!fill(deadline)) return;
            }
        }
    }
}
