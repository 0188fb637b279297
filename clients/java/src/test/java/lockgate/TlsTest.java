package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * A gateway served over TLS that requires a client certificate ({@code
 * --tls-cert}, {@code --tls-key}, {@code --tls-client-ca}), with certificates
 * made for the test by {@code scripts/make-certs.sh}.
 */
class TlsTest {
    private static Path certs;
    private static Path otherCa;
    private static Servers.Stack stack;

    @BeforeAll
    static void start() throws Exception {
        Process help = new ProcessBuilder(Servers.binary().toString(), "serve", "--help").redirectErrorStream(true)
                .start();
        String text = new String(help.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        help.waitFor(30, TimeUnit.SECONDS);
        Assumptions.assumeTrue(text.contains("--tls-cert"), "the gateway binary has no serve --tls-cert");
        certs = makeCertificates("certs", "java-client");
        otherCa = makeCertificates("other-ca");
        stack = Servers.own("--tls-cert", certs.resolve("server.pem").toString(),
                "--tls-key", certs.resolve("server-key.pem").toString(),
                "--tls-client-ca", certs.resolve("ca.pem").toString());
    }

    @AfterAll
    static void stop() {
        if (stack != null) {
            stack.close();
        }
    }

    private static Path makeCertificates(String name, String... clients) throws IOException, InterruptedException {
        Path dir = Servers.dir().resolve(name);
        String[] command = new String[clients.length + 2];
        command[0] = Servers.repository().resolve("scripts/make-certs.sh").toString();
        command[1] = dir.toString();
        System.arraycopy(clients, 0, command, 2, clients.length);
        Process p = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(Servers.dir().resolve(name + ".log").toFile()).start();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0, "make-certs.sh: " + Servers.log(name + ".log"));
        return dir;
    }

    private static Gateway client() {
        return stack.client().timeout(Duration.ofSeconds(5));
    }

    @Test
    void a_lock_over_tls_with_a_ca_bundle_and_a_client_certificate(TestInfo info) throws Exception {
        assertTrue(stack.gateway().url().startsWith("https://"));
        Gateway gw = client().tls(certs.resolve("ca.pem"), certs.resolve("java-client.pem"),
                certs.resolve("java-client-key.pem"));
        String key = Servers.key(info.getDisplayName());
        String result = gw.withLock(key, LockOptions.ttl(Duration.ofSeconds(3)), held -> {
            assertTrue(held.fencingToken() > 0);
            Thread.sleep(3500);
            held.check();
            return "done";
        });
        assertEquals("done", result);
        assertTrue(gw.inspect(key).isEmpty());
        try (Session session = gw.session(Duration.ofSeconds(5)); Watcher watcher = gw.watch(key)) {
            assertEquals(WatchEvent.Type.SNAPSHOT, watcher.poll(Duration.ofSeconds(10)).type());
            session.acquire(key, LockOptions.defaults());
            assertEquals(WatchEvent.Type.ACQUIRED, watcher.poll(Duration.ofSeconds(10)).type());
        }
    }

    @Test
    void without_a_client_certificate_the_handshake_is_refused(TestInfo info) {
        Gateway gw = client().tls(certs.resolve("ca.pem"));
        GatewayUnavailableException e = assertThrows(GatewayUnavailableException.class,
                () -> gw.lock(Servers.key(info.getDisplayName())).lock());
        assertEquals(0, e.status());
    }

    @Test
    void a_gateway_whose_certificate_another_ca_signed_is_refused(TestInfo info) {
        Gateway gw = client().tls(otherCa.resolve("ca.pem"), certs.resolve("java-client.pem"),
                certs.resolve("java-client-key.pem"));
        GatewayUnavailableException e = assertThrows(GatewayUnavailableException.class,
                () -> gw.inspect(Servers.key(info.getDisplayName())));
        assertTrue(causedBy(e, javax.net.ssl.SSLException.class), () -> "a TLS failure: " + e);
    }

    @Test
    void a_client_key_in_its_sec1_form_works_too(TestInfo info) throws Exception {
        Path sec1 = certs.resolve("java-client-sec1-key.pem");
        Process p = new ProcessBuilder("openssl", "ec", "-in", certs.resolve("java-client-key.pem").toString(),
                "-out", sec1.toString()).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0);
        assertTrue(java.nio.file.Files.readString(sec1).contains("BEGIN EC PRIVATE KEY"));
        Gateway gw = client().tls(certs.resolve("ca.pem"), certs.resolve("java-client.pem"), sec1);
        assertTrue(gw.inspect(Servers.key(info.getDisplayName())).isEmpty());
    }

    @Test
    void a_file_that_is_not_pem_is_refused_at_once() {
        assertThrows(IllegalArgumentException.class,
                () -> client().tls(certs.resolve("ca.pem"), certs.resolve("java-client.pem"), certs.resolve("ca.pem")));
    }

    private static boolean causedBy(Throwable t, Class<? extends Throwable> type) {
        for (; t != null; t = t.getCause()) {
            if (type.isInstance(t)) {
                return true;
            }
        }
        return false;
    }
}
