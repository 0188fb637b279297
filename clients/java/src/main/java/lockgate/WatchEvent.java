package lockgate;

import java.time.Instant;
import java.util.Optional;

/**
 * One event of a watched lock ({@code GET /locks/{key}/events}). Fields an
 * event does not carry are empty (0 for a fencing token). Times are by the
 * Redis server's clock.
 *
 * @param id the stream's last event id when it came: what a watch resumes after
 * @param fencingToken the hold it is about (acquired, value, mode, released, expired, revoked)
 * @param mode {@code exclusive}, {@code shared} or {@code counted} (acquired, mode)
 * @param snapshot the lock's state (snapshot)
 * @param data the event's JSON as the gateway sent it
 */
public record WatchEvent(Type type, String id, String key, long fencingToken, Optional<String> value, String mode,
        Optional<Instant> expiresAt, Optional<Instant> delayedUntil, Optional<LockStatus> snapshot, String data) {

    /** The events of a watched lock. */
    @Wire.Schema("LockWatchEventName")
    public enum Type implements Wire.Named {
        /** The lock's state; always first, and again after {@link #GAP}. */
        SNAPSHOT("snapshot"),
        /** A holder was granted it. */
        ACQUIRED("acquired"),
        /** A holder replaced its public value. */
        VALUE("value"),
        /** A holder changed its mode (an upgrade, with a new fencing token, or a downgrade). */
        MODE("mode"),
        /** The hold was released. */
        RELEASED("released"),
        /** The hold's lease ran out (told at most 1 s after). */
        EXPIRED("expired"),
        /** An operator revoked the hold. */
        REVOKED("revoked"),
        /** A lock-delay keeps the free lock from holders until {@link WatchEvent#delayedUntil()}. */
        DELAYED("delayed"),
        /** The events after the resumed id are no longer kept; a snapshot follows. */
        GAP("gap"),
        /** An event this client does not know (a newer gateway's). */
        OTHER("other");

        private final String wire;

        Type(String wire) {
            this.wire = wire;
        }

        @Override
        public String wire() {
            return wire;
        }

        static Type of(String name) {
            for (Type type : values()) {
                if (type.wire.equals(name)) {
                    return type;
                }
            }
            return OTHER;
        }
    }

    /** Reads one event of the stream; an event whose data does not fit its type keeps only its raw data. */
    static WatchEvent of(EventStreamParser.Event event) {
        Type type = Type.of(event.type());
        String data = event.data();
        try {
            switch (type) {
                case SNAPSHOT: {
                    LockStatus status = LockStatus.parse(data);
                    return new WatchEvent(type, event.id(), status.key(), status.fencingToken(), Optional.empty(),
                            status.held() ? status.mode().wire() : "", Optional.empty(), status.delayedUntil(),
                            Optional.of(status), data);
                }
                case ACQUIRED: {
                    Api.AcquiredEvent e = Wire.decode(data, Api.AcquiredEvent.class);
                    return new WatchEvent(type, event.id(), e.key(), e.fencingToken(), Optional.ofNullable(e.value()),
                            e.mode(), Optional.of(Instant.ofEpochMilli(e.expiresAtMs())), Optional.empty(),
                            Optional.empty(), data);
                }
                case VALUE: {
                    Api.ValueEvent e = Wire.decode(data, Api.ValueEvent.class);
                    return simple(type, event, e.key(), e.fencingToken(), Optional.ofNullable(e.value()), "");
                }
                case MODE: {
                    Api.ModeEvent e = Wire.decode(data, Api.ModeEvent.class);
                    return new WatchEvent(type, event.id(), e.key(), e.fencingToken(), Optional.empty(), e.mode(),
                            Optional.of(Instant.ofEpochMilli(e.expiresAtMs())), Optional.empty(), Optional.empty(),
                            data);
                }
                case RELEASED:
                case EXPIRED:
                case REVOKED: {
                    Api.EndedEvent e = Wire.decode(data, Api.EndedEvent.class);
                    return simple(type, event, e.key(), e.fencingToken(), Optional.empty(), "");
                }
                case DELAYED: {
                    Api.DelayedEvent e = Wire.decode(data, Api.DelayedEvent.class);
                    return new WatchEvent(type, event.id(), e.key(), 0, Optional.empty(), "", Optional.empty(),
                            Optional.of(Instant.ofEpochMilli(e.delayedUntilMs())), Optional.empty(), data);
                }
                default:
                    break;
            }
        } catch (IllegalArgumentException unreadable) {
            // Kept as raw data below.
        }
        return simple(type, event, "", 0, Optional.empty(), "");
    }

    private static WatchEvent simple(Type type, EventStreamParser.Event event, String key, long fencingToken,
            Optional<String> value, String mode) {
        return new WatchEvent(type, event.id(), key, fencingToken, value, mode, Optional.empty(), Optional.empty(),
                Optional.empty(), event.data());
    }
}
