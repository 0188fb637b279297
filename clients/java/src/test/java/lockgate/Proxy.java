package lockgate;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** A TCP proxy to a gateway that a test can make misbehave: drop answers, cut every connection. */
final class Proxy implements AutoCloseable {
    private final ServerSocket listener;
    private final String host;
    private final int port;
    private final List<Socket> open = new ArrayList<>();
    private final List<String> dropped = new ArrayList<>();
    private int dropNext;

    Proxy(String upstream) throws IOException {
        String[] parts = upstream.split(":");
        this.host = parts[0];
        this.port = Integer.parseInt(parts[1]);
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread accepting = new Thread(this::accept, "proxy-accept");
        accepting.setDaemon(true);
        accepting.start();
    }

    String url() {
        return "http://127.0.0.1:" + listener.getLocalPort();
    }

    /**
     * The next {@code n} connections pass their request on, wait for the
     * gateway's answer, and close without passing it back: the request took
     * effect, and its answer was lost on the way.
     */
    synchronized void dropAnswers(int n) {
        dropNext = n;
    }

    /** What the gateway answered on each dropped connection. */
    synchronized List<String> droppedAnswers() {
        return new ArrayList<>(dropped);
    }

    /** Closes every open connection. */
    void cut() {
        List<Socket> all;
        synchronized (this) {
            all = new ArrayList<>(open);
            open.clear();
        }
        for (Socket socket : all) {
            try {
                socket.close();
            } catch (IOException ignored) {
                // Closed already.
            }
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        cut();
    }

    private void accept() {
        while (true) {
            Socket client;
            try {
                client = listener.accept();
            } catch (IOException closed) {
                return;
            }
            boolean drop;
            synchronized (this) {
                drop = dropNext > 0;
                if (drop) {
                    dropNext--;
                }
            }
            Socket upstream = new Socket();
            try {
                upstream.connect(new InetSocketAddress(host, port), 5000);
            } catch (IOException e) {
                quietly(client);
                continue;
            }
            synchronized (this) {
                open.add(client);
                open.add(upstream);
            }
            pump(client, upstream, null);
            pump(upstream, client, drop ? dropped : null);
        }
    }

    /** Copies {@code from} to {@code to}; with {@code swallow}, keeps the first answer there and closes both instead. */
    private void pump(Socket from, Socket to, List<String> swallow) {
        Thread thread = new Thread(() -> {
            byte[] buffer = new byte[65536];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                if (swallow != null) {
                    int n = in.read(buffer);
                    synchronized (this) {
                        swallow.add(n > 0 ? new String(buffer, 0, n, StandardCharsets.UTF_8) : "");
                    }
                    return;
                }
                int n;
                while ((n = in.read(buffer)) > 0) {
                    out.write(buffer, 0, n);
                    out.flush();
                }
            } catch (IOException ended) {
                // One side closed.
            } finally {
                quietly(from);
                quietly(to);
            }
        }, "proxy-pump");
        thread.setDaemon(true);
        thread.start();
    }

    private static void quietly(Socket socket) {
        try {
            socket.close();
        } catch (IOException ignored) {
            // Closed already.
        }
    }
}
