package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** A gateway with API keys: the key travels as {@code Authorization: Bearer}; without it, {@code unauthorized}. */
class AuthTest {
    private static Servers.Stack stack;

    @BeforeAll
    static void start() {
        stack = Servers.own("--api-keys", "java-key-1,java-key-2", "--admin-token", "java-admin");
    }

    @AfterAll
    static void stop() {
        stack.close();
    }

    @Test
    void a_lock_with_an_api_key_is_granted_and_one_without_is_refused(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Gateway keyed = stack.client().apiKey("java-key-2");
        try (HeldLock held = keyed.acquire(key, LockOptions.ttl(Duration.ofSeconds(5)))) {
            assertTrue(held.fencingToken() > 0);
            assertTrue(keyed.inspect(key).isPresent());
            assertThrows(UnauthorizedException.class, () -> stack.client().inspect(key));
        }
        UnauthorizedException e = assertThrows(UnauthorizedException.class, () -> stack.client().lock(key).lock());
        assertEquals(401, e.status());
        InvalidRequestException wrong = assertThrows(InvalidRequestException.class,
                () -> stack.client().apiKey("wrong").session());
        assertTrue(wrong instanceof UnauthorizedException || wrong instanceof ForbiddenException, wrong::toString);
    }

    @Test
    void revoking_needs_the_admin_token(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        HeldLock held = stack.client().apiKey("java-key-1").acquire(key, LockOptions.defaults());
        assertThrows(InvalidRequestException.class, () -> stack.client().apiKey("java-key-1").revoke(key));
        assertTrue(stack.client().apiKey("java-admin").revoke(key));
        assertEquals(LossReason.REVOKED, held.lost().get(5, java.util.concurrent.TimeUnit.SECONDS));
    }
}
