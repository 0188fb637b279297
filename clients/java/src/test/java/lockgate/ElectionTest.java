package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** Leader election: one leader at a time, the next one elected at once when it goes, its term larger. */
class ElectionTest {
    private final Gateway gw = Servers.shared().client();

    @Test
    void the_next_candidate_leads_when_the_leader_resigns(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Election election = gw.election(key, LockOptions.ttl(Duration.ofSeconds(10)));
        Leadership first = election.campaign("10.0.0.7:9000");
        assertEquals(Optional.of(new Leader("10.0.0.7:9000", first.term())), election.leader());
        CompletableFuture<Leadership> second = CompletableFuture.supplyAsync(() -> {
            try {
                return gw.election(key).campaign("10.0.0.8:9000");
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Servers.eventually(5000, "the second waits", () -> !gw.inspect(key).orElseThrow().waiters().isEmpty());
        assertFalse(second.isDone());
        try (Election.Observer observer = election.observe()) {
            assertEquals("10.0.0.7:9000", observer.take().orElseThrow().value());
            first.proclaim("10.0.0.7:9001");
            assertEquals(new Leader("10.0.0.7:9001", first.term()), observer.take().orElseThrow());
            first.resign();
            Leadership next = second.get(10, TimeUnit.SECONDS);
            assertTrue(next.term() > first.term());
            Optional<Leader> seen = observer.take();
            if (seen.isEmpty()) {
                seen = observer.take();
            }
            assertEquals(new Leader("10.0.0.8:9000", next.term()), seen.orElseThrow());
            next.resign();
            assertEquals(Optional.empty(), observer.take());
        }
    }

    @Test
    void a_leader_whose_process_is_killed_loses_office_at_once(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        String classes = System.getProperty("lockgate.classpath", System.getProperty("java.class.path"));
        Process candidate = new ProcessBuilder(Path.java(), "-cp", classes, "lockgate.Candidate",
                Servers.shared().gateway().url(), key, "10.0.0.9:9000").redirectErrorStream(true).start();
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(candidate.getInputStream(),
                    StandardCharsets.UTF_8));
            String line = out.readLine();
            assertTrue(line != null && line.startsWith("leader "), "the candidate leads: " + line);
            long term = Long.parseLong(line.substring("leader ".length()).trim());
            CompletableFuture<Leadership> next = CompletableFuture.supplyAsync(() -> {
                try {
                    return gw.election(key).campaign("10.0.0.10:9000");
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            Servers.eventually(5000, "the second waits", () -> !gw.inspect(key).orElseThrow().waiters().isEmpty());
            long killed = System.nanoTime();
            candidate.destroyForcibly();
            Leadership leadership = next.get(10, TimeUnit.SECONDS);
            assertTrue(System.nanoTime() - killed < TimeUnit.SECONDS.toNanos(4), "at once, not at its lease's end");
            assertTrue(leadership.term() > term);
            leadership.resign();
        } finally {
            candidate.destroyForcibly();
        }
    }

    /** The java launcher of this JVM. */
    private static final class Path {
        static String java() {
            return java.nio.file.Path.of(System.getProperty("java.home"), "bin", "java").toString();
        }
    }

}
