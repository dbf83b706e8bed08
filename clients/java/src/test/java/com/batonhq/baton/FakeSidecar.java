package com.batonhq.baton;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/** A scripted HTTP/1.1 server on a unix socket, standing in for the sidecar in unit tests. */
final class FakeSidecar implements AutoCloseable {
    record Req(String method, String target, String body) {}

    /**
     * An answer; hang = never answer (until the server closes); close = close after answering;
     * drop = close the connection without answering (after reading the request).
     */
    record Answer(int status, String body, boolean chunked, boolean close, long delayMs, boolean hang, boolean drop) {
        static Answer json(int status, String body) {
            return new Answer(status, body, false, false, 0, false, false);
        }

        Answer asChunked() {
            return new Answer(status, body, true, close, delayMs, hang, drop);
        }

        Answer closing() {
            return new Answer(status, body, chunked, true, delayMs, hang, drop);
        }

        Answer delayed(long ms) {
            return new Answer(status, body, chunked, close, ms, hang, drop);
        }

        static Answer hanging() {
            return new Answer(0, "", false, false, 0, true, false);
        }

        static Answer dropping() {
            return new Answer(0, "", false, false, 0, false, true);
        }
    }

    interface Handler {
        Answer handle(Req r) throws Exception;
    }

    final Path dir;
    final Path socket;
    final List<Req> requests = new CopyOnWriteArrayList<>();
    final AtomicInteger accepted = new AtomicInteger();
    final AtomicInteger closedByClient = new AtomicInteger();
    private final ServerSocketChannel server;
    private final List<SocketChannel> conns = new CopyOnWriteArrayList<>();
    private final List<Thread> servers = new CopyOnWriteArrayList<>();
    private volatile Handler handler;
    private volatile boolean closed;

    FakeSidecar(Handler h) throws IOException {
        this.handler = h;
        this.dir = Files.createTempDirectory("bj");
        this.socket = dir.resolve("s.sock");
        this.server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(socket));
        Thread t = new Thread(this::acceptLoop, "fake-accept");
        t.setDaemon(true);
        t.start();
    }

    void setHandler(Handler h) {
        this.handler = h;
    }

    List<Req> requests(String method, String prefix) {
        return requests.stream().filter(r -> r.method().equals(method) && r.target().startsWith(prefix)).toList();
    }

    private void acceptLoop() {
        while (!closed) {
            try {
                SocketChannel c = server.accept();
                accepted.incrementAndGet();
                conns.add(c);
                Thread t = new Thread(() -> serve(c), "fake-conn");
                t.setDaemon(true);
                servers.add(t);
                t.start();
            } catch (IOException e) {
                return;
            }
        }
    }

    private static String line(InputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        while (true) {
            int c = in.read();
            if (c < 0) return b.size() == 0 ? null : b.toString(StandardCharsets.ISO_8859_1);
            if (c == '\n') {
                String s = b.toString(StandardCharsets.ISO_8859_1);
                return s.endsWith("\r") ? s.substring(0, s.length() - 1) : s;
            }
            b.write(c);
        }
    }

    private void serve(SocketChannel c) {
        try (c) {
            InputStream in = Channels.newInputStream(c);
            OutputStream out = Channels.newOutputStream(c);
            while (true) {
                String start = line(in);
                if (start == null) {
                    closedByClient.incrementAndGet();
                    return;
                }
                String[] p = start.split(" ");
                int length = 0;
                String h;
                while ((h = line(in)) != null && !h.isEmpty()) {
                    int colon = h.indexOf(':');
                    if (h.substring(0, colon).trim().toLowerCase(Locale.ROOT).equals("content-length")) {
                        length = Integer.parseInt(h.substring(colon + 1).trim());
                    }
                }
                byte[] body = in.readNBytes(length);
                Req r = new Req(p[0], p[1], new String(body, StandardCharsets.UTF_8));
                requests.add(r);
                Answer a;
                try {
                    a = handler.handle(r);
                } catch (Exception e) {
                    a = Answer.json(500, "{\"error\":\"InternalError\",\"message\":\"" + e + "\"}");
                }
                if (a.drop()) return; // closes the connection: no answer
                if (a.hang()) {
                    // never answer; notice the client closing
                    if (in.read() < 0) closedByClient.incrementAndGet();
                    return;
                }
                if (a.delayMs() > 0) Thread.sleep(a.delayMs());
                byte[] b = a.body().getBytes(StandardCharsets.UTF_8);
                StringBuilder head = new StringBuilder("HTTP/1.1 " + a.status() + " X\r\nContent-Type: application/json\r\n");
                if (a.close()) head.append("Connection: close\r\n");
                if (a.chunked()) {
                    head.append("Transfer-Encoding: chunked\r\n\r\n");
                    out.write(head.toString().getBytes(StandardCharsets.ISO_8859_1));
                    int half = b.length / 2;
                    for (int[] part : new int[][] {{0, half}, {half, b.length}}) {
                        int n = part[1] - part[0];
                        if (n == 0) continue;
                        out.write((Integer.toHexString(n) + ";ext=1\r\n").getBytes(StandardCharsets.ISO_8859_1));
                        out.write(b, part[0], n);
                        out.write("\r\n".getBytes(StandardCharsets.ISO_8859_1));
                        out.flush();
                    }
                    out.write("0\r\n\r\n".getBytes(StandardCharsets.ISO_8859_1));
                } else {
                    head.append("Content-Length: ").append(b.length).append("\r\n\r\n");
                    out.write(head.toString().getBytes(StandardCharsets.ISO_8859_1));
                    out.write(b);
                }
                out.flush();
                if (a.close()) return;
            }
        } catch (IOException | InterruptedException e) {
            // connection gone
        }
    }

    /**
     * Closes every open connection (as a sidecar's idle timeout would), keeps listening. Returns
     * once the threads serving them have ended: a channel closed while another thread reads it is
     * closed for good (seen by the client) only when that read returns.
     */
    void dropConnections() throws IOException {
        for (SocketChannel c : conns) c.close();
        conns.clear();
        for (Thread t : servers) {
            try {
                t.join(10_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
        servers.removeIf(t -> !t.isAlive());
    }

    @Override
    public void close() throws IOException {
        closed = true;
        server.close();
        dropConnections();
        Files.deleteIfExists(socket);
        Files.deleteIfExists(dir);
    }
}
