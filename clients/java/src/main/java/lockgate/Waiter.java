package lockgate;

import java.time.Instant;

/**
 * A request waiting for a lock, on any instance.
 *
 * @param position 1 is served next
 * @param mode {@code exclusive} or {@code shared}, as the gateway names it
 */
public record Waiter(long position, String mode, Instant waitingSince) {}
