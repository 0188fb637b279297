package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** JSON, the wire records, and problem documents read as the exception of their slug. */
class WireTest {
    @Test
    void fencing_tokens_are_read_exactly_as_longs() {
        Api.LockGrant a = Wire.decode("{\"key\":\"k\",\"token\":\"t\",\"fencing_token\":9007199254740993,"
                + "\"ttl_ms\":1,\"expires_at_ms\":2,\"holds\":1,\"waited_ms\":0}", Api.LockGrant.class);
        assertEquals(9007199254740993L, a.fencingToken(), "past 2^53, where a double cannot tell it from its neighbour");
        assertInstanceOf(BigInteger.class, Json.parse("18446744073709551615"));
        assertThrows(IllegalArgumentException.class, () -> Wire.decode("{\"key\":\"k\",\"token\":\"t\","
                + "\"fencing_token\":18446744073709551615,\"ttl_ms\":1,\"expires_at_ms\":2,\"holds\":1,\"waited_ms\":0}",
                Api.LockGrant.class), "one that does not fit is refused, not cut");
    }

    @Test
    void a_document_missing_what_the_client_needs_is_refused_and_nullable_members_may_be_absent() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Wire.decode("{\"key\":\"k\",\"fencing_token\":1}", Api.LockGrant.class));
        assertTrue(e.getMessage().contains("token"), e.getMessage());
        Api.LeaseEntry lease = Wire.decode("{\"fencing_token\":1,\"holds\":1,\"acquired_at_ms\":1,\"expires_at_ms\":2,"
                + "\"value\":null}", Api.LeaseEntry.class);
        assertNull(lease.value());
        assertNull(lease.permits());
    }

    @Test
    void bodies_are_written_without_their_null_members() {
        Api.AcquireBody body = LockOptions.shared().withTtl(Duration.ofSeconds(3)).body("k", 0L, null, null);
        assertEquals("{\"key\":\"k\",\"ttl_ms\":3000,\"wait_ms\":0,\"mode\":\"shared\"}", Json.write(Wire.encode(body)));
        Api.AcquireBody inSession = LockOptions.ttl(Duration.ofSeconds(3)).body("k", 0L, "s", null);
        assertNull(inSession.ttlMs(), "a lock in a session has the session's lease");
    }

    @Test
    void json_round_trips_strings_with_escapes() {
        String text = "a\"b\\c\n\u0001é";
        assertEquals(text, Json.parse(Json.write(text)));
        assertEquals(Map.of("a", List.of(1L, true)), Json.parse(" { \"a\" : [ 1 , true ] } "));
        assertThrows(IllegalArgumentException.class, () -> Json.parse("{\"a\":1} x"));
        assertThrows(IllegalArgumentException.class, () -> Json.parse("[".repeat(100) + "]".repeat(100)));
    }

    @Test
    void each_slug_is_its_own_exception_under_its_group() {
        assertInstanceOf(LockHeldException.class, refusal(409, "lock-held"));
        assertInstanceOf(NotOwnerException.class, refusal(409, "not-owner"));
        assertInstanceOf(LockLostException.class, refusal(404, "lock-not-found"));
        assertInstanceOf(SessionNotFoundException.class, refusal(404, "session-not-found"));
        assertInstanceOf(DeadlockException.class, refusal(409, "deadlock"));
        assertInstanceOf(BackendUnavailableException.class, refusal(503, "backend-unavailable"));
        assertInstanceOf(GatewayUnavailableException.class, refusal(503, "shutting-down"));
        assertInstanceOf(InvalidFieldException.class, refusal(422, "invalid-field"));
        assertInstanceOf(InvalidRequestException.class, refusal(403, "forbidden"));
        // Slugs this client does not know go by their status.
        assertEquals(InvalidRequestException.class, refusal(418, "some-new-refusal").getClass());
        assertEquals(GatewayUnavailableException.class, refusal(507, "some-new-failure").getClass());
        assertEquals(GatewayUnavailableException.class, refusal(429, "rate-limited").getClass());
    }

    private static LockgateException refusal(int status, String slug) {
        return Problems.refusal(status, "{\"type\":\"/problems/" + slug + "\",\"title\":\"T\",\"status\":" + status
                + ",\"detail\":\"d\"}", null);
    }

    @Test
    void a_problem_keeps_its_members() {
        LockgateException e = Problems.refusal(409, "{\"type\":\"/problems/deadlock\",\"title\":\"Deadlock\","
                + "\"status\":409,\"detail\":\"x waits\",\"key\":\"x\",\"cycle\":[\"x\",\"y\"],\"big\":1}", null);
        DeadlockException deadlock = assertInstanceOf(DeadlockException.class, e);
        assertEquals(List.of("x", "y"), deadlock.cycle());
        assertEquals("x", e.problem().key().orElseThrow());
        assertEquals(1L, e.problem().members().get("big"));
        assertEquals("Deadlock: x waits (deadlock, 409)", e.getMessage());
        LockHeldException held = assertInstanceOf(LockHeldException.class, Problems.refusal(409,
                "{\"type\":\"/problems/lock-held\",\"title\":\"Lock is held\",\"status\":409,\"detail\":\"d\"}", "2"));
        assertEquals(Duration.ofSeconds(2), held.retryAfter().orElseThrow(), "from Retry-After when the body has none");
    }

    @Test
    void an_answer_that_is_not_a_problem_is_described_by_its_status() {
        LockgateException e = Problems.refusal(502, "<html>Bad Gateway</html>", "3");
        assertEquals(GatewayUnavailableException.class, e.getClass());
        assertEquals("about:blank", e.problem().type());
        assertEquals("", e.slug());
        assertEquals(502, e.status());
        assertEquals("<html>Bad Gateway</html>", e.problem().detail());
        assertEquals(Duration.ofSeconds(3), e.problem().retryAfter().orElseThrow());
    }

    @Test
    void the_safety_margin_is_a_tenth_of_the_lease_between_one_second_and_a_third() {
        assertEquals(200, LeaseClock.marginMs(600));
        assertEquals(1000, LeaseClock.marginMs(3000));
        assertEquals(1000, LeaseClock.marginMs(10_000));
        assertEquals(3000, LeaseClock.marginMs(30_000));
    }

    @Test
    void the_lease_clock_never_ends_after_the_real_end() {
        long sent = 0;
        long received = 5_000_000_000L;
        LeaseClock clock = new LeaseClock(30_000, 100_030_000, sent, received, 0);
        assertEquals(27_000_000_000L, clock.deadlineNanos(), "timed from the sending, a margin early");
        // A renewal moves it by what the gateway says, never past its arrival plus a lease (less the margin).
        clock.renewed(100_035_000, 20_000_000_000L);
        assertEquals(32_000_000_000L, clock.deadlineNanos());
        clock.renewed(100_040_000, 6_000_000_000L);
        assertEquals(33_000_000_000L, clock.deadlineNanos());
        clock.renewed(100_020_000, 8_000_000_000L);
        assertEquals(33_000_000_000L, clock.deadlineNanos(), "a renewal does not move it back");
    }
}
