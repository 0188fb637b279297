package lockgate;

/**
 * The events of a streamed lock and of a streamed batch, which are held and
 * lost alike: {@code queued} while it waits, {@code acquired} (read by the
 * subclass) or {@code refused}, then {@code renewed}, and last {@code
 * released} (with the token, elsewhere) or {@code lost}, each naming the lock
 * that ended. A lock or set taken through a {@link Session} joins it: the
 * session's end is its end.
 */
abstract class LockOpening<T extends AbstractHeld> extends Opening<T> {
    final LockOptions options;
    final Session session;

    LockOpening(Gateway gateway, LockOptions options, Session session) {
        super(gateway, "grant");
        this.options = options;
        this.session = session;
    }

    /** Whether its lease is a session's (one opened here or elsewhere): then it has no deadline of its own. */
    final boolean inSession() {
        return session != null || options.session() != null;
    }

    /** Makes the held thing of an {@code acquired} event's data, and {@link #opened} it. */
    abstract void acquired(String data);

    @Override
    public final void onEvent(EventStreamParser.Event event) {
        T thing = made();
        switch (event.type()) {
            case "queued":
                if (options.queued() != null) {
                    options.queued().accept(Wire.decode(event.data(), Api.QueuedEvent.class).position());
                }
                break;
            case "acquired":
                acquired(event.data());
                break;
            case "refused":
                refused(Problems.refusal(409, event.data(), null));
                break;
            case "renewed":
                if (thing != null) {
                    thing.holding.renewed(Wire.decode(event.data(), Api.RenewedEvent.class).expiresAtMs());
                }
                break;
            case "released":
                // The client's own release ends the stream this way too; then it is under way and this does nothing.
                if (thing != null) {
                    String key = Wire.decode(event.data(), Api.ReleasedEvent.class).key();
                    thing.holding.lose(LossReason.RELEASED_ELSEWHERE, LossReason.RELEASED_ELSEWHERE.wire(), key, null);
                }
                break;
            case "lost":
                if (thing != null) {
                    Api.LostEvent lost = Wire.decode(event.data(), Api.LostEvent.class);
                    LossReason reason = LossReason.of(lost.reason());
                    Throwable cause = reason == LossReason.SESSION_ENDED && session != null ? session.loss() : null;
                    thing.holding.lose(reason, lost.reason(), lost.key(), cause);
                }
                break;
            default:
                break;
        }
    }

    @Override
    final void joined(T thing) {
        if (session == null) {
            return;
        }
        Holding holding = thing.holding;
        if (!session.attach(holding, thing::markClosed)) {
            holding.lose(LossReason.SESSION_ENDED, session.loss());
        } else {
            holding.onLoss(loss -> session.forget(holding));
        }
    }
}
