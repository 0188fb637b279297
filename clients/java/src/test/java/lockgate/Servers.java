package lockgate;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The real processes the tests run against: a redis-server on a free port
 * (no persistence) and the lockgate gateway ({@code LOCKGATE_BIN}) on a port
 * of its own choosing. Most tests share one of each ({@link #shared()}, with
 * the admin token {@link #ADMIN_TOKEN}); a test that kills, freezes or
 * reconfigures its gateway starts its own. Every process is stopped when
 * the JVM exits; their logs go to a temporary directory, kept when {@code
 * LOCKGATE_TEST_KEEP_LOGS} is set.
 */
final class Servers {
    private Servers() {}

    static final String ADMIN_TOKEN = "test-admin-token";

    private static final Path DIR = logDir();
    private static final List<Process> STARTED = new ArrayList<>();
    private static final AtomicInteger INSTANCES = new AtomicInteger();
    private static final Pattern SERVING = Pattern.compile("lockgate serving addr=(\\S+)");
    private static Stack shared;

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(Servers::stopAll));
    }

    private static Path logDir() {
        try {
            return Files.createTempDirectory("lockgate-java-");
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void stopAll() {
        List<Process> all;
        synchronized (STARTED) {
            all = new ArrayList<>(STARTED);
        }
        for (Process p : all) {
            signal(p, "CONT");
            p.destroyForcibly();
        }
        if (System.getenv("LOCKGATE_TEST_KEEP_LOGS") == null) {
            try (var files = Files.walk(DIR)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            } catch (IOException ignored) {
                // A temporary directory left behind.
            }
        } else {
            System.err.println("test logs kept in " + DIR);
        }
    }

    /** A Redis and a gateway (admin token {@link #ADMIN_TOKEN}) for tests that leave them as they found them. */
    static synchronized Stack shared() {
        if (shared == null) {
            Redis redis = Redis.start();
            shared = new Stack(redis, Gateway.start(redis, "--admin-token", ADMIN_TOKEN));
        }
        return shared;
    }

    /** A Redis and a gateway of one test's own, to kill or freeze. */
    static Stack own(String... gatewayArgs) {
        Redis redis = Redis.start();
        return new Stack(redis, Gateway.start(redis, gatewayArgs));
    }

    static Path binary() {
        String bin = System.getenv("LOCKGATE_BIN");
        return bin != null ? Path.of(bin) : Path.of("..", "..", "target", "release", "lockgate");
    }

    static Path repository() {
        return Path.of(System.getProperty("lockgate.repository", "../.."));
    }

    static int freePort() {
        try (ServerSocket socket = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return socket.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    static Process launch(String logName, List<String> command) {
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.redirectErrorStream(true);
        builder.redirectOutput(DIR.resolve(logName).toFile());
        builder.environment().put("NO_COLOR", "1");
        builder.environment().putIfAbsent("RUST_LOG", "info");
        try {
            Process p = builder.start();
            synchronized (STARTED) {
                STARTED.add(p);
            }
            return p;
        } catch (IOException e) {
            throw new IllegalStateException("cannot start " + command.get(0), e);
        }
    }

    static void signal(Process p, String signal) {
        if (!p.isAlive()) {
            return;
        }
        try {
            new ProcessBuilder("kill", "-" + signal, Long.toString(p.pid())).start().waitFor(5, TimeUnit.SECONDS);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static String log(String name) {
        try {
            return Files.readString(DIR.resolve(name));
        } catch (IOException e) {
            return "";
        }
    }

    static Path dir() {
        return DIR;
    }

    /** A Redis and a gateway on it. */
    record Stack(Redis redis, Gateway gateway) implements AutoCloseable {
        lockgate.Gateway client() {
            return gateway.client();
        }

        lockgate.Gateway admin() {
            return gateway.client().apiKey(ADMIN_TOKEN);
        }

        @Override
        public void close() {
            gateway.stop();
            redis.stop();
        }
    }

    /** A process of the tests, which a test may freeze (SIGSTOP) and thaw. */
    abstract static class Managed {
        final Process process;

        Managed(Process process) {
            this.process = process;
        }

        void freeze() {
            signal(process, "STOP");
        }

        void thaw() {
            signal(process, "CONT");
        }
    }

    /** A redis-server of the tests. */
    static final class Redis extends Managed {
        final int port;

        private Redis(int port, Process process) {
            super(process);
            this.port = port;
        }

        static Redis start() {
            IllegalStateException last = null;
            for (int attempt = 0; attempt < 5; attempt++) {
                int port = freePort();
                Process p = launch("redis-" + port + ".log", List.of("redis-server", "--port", Integer.toString(port),
                        "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"));
                Redis redis = new Redis(port, p);
                try {
                    redis.waitForPing();
                    return redis;
                } catch (IllegalStateException e) {
                    // The port may have been taken meanwhile: another one.
                    last = e;
                    p.destroyForcibly();
                }
            }
            throw last;
        }

        private void waitForPing() {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (System.nanoTime() < until) {
                if (!process.isAlive()) {
                    throw new IllegalStateException("redis-server exited: " + log("redis-" + port + ".log"));
                }
                try {
                    if ("PONG".equals(command("PING"))) {
                        return;
                    }
                } catch (IOException notYet) {
                    // Not listening yet.
                }
                sleep(20);
            }
            throw new IllegalStateException("no PONG from redis on port " + port);
        }

        String url() {
            return "redis://127.0.0.1:" + port;
        }

        /** One command in RESP; the reply's first line without its type byte. */
        String command(String... args) throws IOException {
            try (Socket socket = new Socket()) {
                socket.connect(new InetSocketAddress("127.0.0.1", port), 1000);
                socket.setSoTimeout(5000);
                StringBuilder out = new StringBuilder("*" + args.length + "\r\n");
                for (String arg : args) {
                    out.append('$').append(arg.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(arg)
                            .append("\r\n");
                }
                OutputStream o = socket.getOutputStream();
                o.write(out.toString().getBytes(StandardCharsets.UTF_8));
                o.flush();
                InputStream in = socket.getInputStream();
                StringBuilder line = new StringBuilder();
                int c;
                while ((c = in.read()) != -1 && c != '\n') {
                    if (c != '\r') {
                        line.append((char) c);
                    }
                }
                return line.length() == 0 ? "" : line.substring(1);
            }
        }

        void stop() {
            thaw();
            process.destroyForcibly();
        }
    }

    /** A lockgate gateway of the tests. */
    static final class Gateway extends Managed {
        final String name;
        final String address;
        final boolean tls;

        private Gateway(String name, String address, Process process, boolean tls) {
            super(process);
            this.name = name;
            this.address = address;
            this.tls = tls;
        }

        static Gateway start(Redis redis, String... args) {
            Path bin = binary();
            if (!Files.isExecutable(bin)) {
                throw new IllegalStateException("no gateway binary at " + bin + " (set LOCKGATE_BIN)");
            }
            String name = "gateway-" + INSTANCES.incrementAndGet();
            List<String> command = new ArrayList<>(List.of(bin.toString(), "serve", "--listen", "127.0.0.1:0",
                    "--redis-url", redis.url(), "--instance-id", name, "--redis-timeout-ms", "1000",
                    "--shutdown-timeout-ms", "2000"));
            command.addAll(List.of(args));
            Process p = launch(name + ".log", command);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (System.nanoTime() < until) {
                Matcher m = SERVING.matcher(log(name + ".log"));
                if (m.find()) {
                    return new Gateway(name, m.group(1), p, List.of(args).contains("--tls-cert"));
                }
                if (!p.isAlive()) {
                    break;
                }
                sleep(20);
            }
            p.destroyForcibly();
            throw new IllegalStateException("the gateway did not start: " + log(name + ".log"));
        }

        String url() {
            return (tls ? "https://" : "http://") + address;
        }

        lockgate.Gateway client() {
            return lockgate.Gateway.create(url());
        }

        /** Ends the gateway as a crash would: it releases nothing. */
        void kill() {
            thaw();
            process.destroyForcibly();
            try {
                process.waitFor(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        void stop() {
            thaw();
            process.destroy();
            try {
                if (!process.waitFor(5, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                process.destroyForcibly();
            }
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** A lock key no other test uses. */
    static String key(String name) {
        return "java-test:" + name.replaceAll("[^A-Za-z0-9._:-]", ".") + ":"
                + Long.toHexString(java.util.concurrent.ThreadLocalRandom.current().nextLong());
    }

    /** Polls {@code condition} until it holds; fails after {@code ms}. */
    static void eventually(long ms, String what, java.util.function.BooleanSupplier condition) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > until) {
                throw new AssertionError("not within " + ms + " ms: " + what);
            }
            sleep(20);
        }
    }
}
