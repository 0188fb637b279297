package lockgate;

import java.util.Optional;

/**
 * Leader election on a lock, as etcd's {@code concurrency.Election}: the
 * leader holds a streamed lock of the key with its address as the value, the
 * other candidates wait in the lock's queue in order, and the fencing token
 * is the term. A leader whose process dies loses office at once (its stream
 * closes); one whose gateway dies, when its lease ends.
 */
public final class Election {
    private final Gateway gateway;
    private final String key;
    private final LockOptions options;

    Election(Gateway gateway, String key, LockOptions options) {
        this.gateway = gateway;
        this.key = key;
        this.options = options;
    }

    public String key() {
        return key;
    }

    /**
     * Runs for leader with {@code value} as the public value and waits until
     * elected, however long that takes: a wait the gateway ends is asked again,
     * a gateway that cannot serve is asked again with backoff.
     *
     * @throws InterruptedException when this thread is interrupted first (then it holds nothing)
     * @throws InvalidRequestException when the gateway refuses the request itself
     */
    public Leadership campaign(String value) throws InterruptedException {
        return new Leadership(gateway.campaign(key, options.withValue(value)));
    }

    /** Who leads now; empty when nobody does. */
    public Optional<Leader> leader() {
        return gateway.inspect(key).flatMap(Election::leaderOf);
    }

    /**
     * Follows who leads: first who leads now, then each new leader, empty when
     * the office falls empty, and the leader again when it proclaims a new value.
     */
    public Observer observe() throws InterruptedException {
        return new Observer(gateway.watch(key));
    }

    static Optional<Leader> leaderOf(LockStatus status) {
        if (!status.held() || status.leases().isEmpty()) {
            return Optional.empty();
        }
        LeaseInfo first = status.leases().get(0);
        return Optional.of(new Leader(first.value().orElse(""), first.fencingToken()));
    }

    /** The changes of leader, read from a watch of the lock. Close it when done. */
    public static final class Observer implements AutoCloseable {
        private final Watcher watcher;
        private Optional<Leader> current = Optional.empty();
        private boolean told;

        Observer(Watcher watcher) {
            this.watcher = watcher;
        }

        /** The next change: a new leader, a new value of the leader, or empty when nobody leads. */
        public synchronized Optional<Leader> take() throws InterruptedException {
            while (true) {
                Optional<Optional<Leader>> next = next(watcher.take());
                if (next.isPresent() && (!told || !next.get().equals(current))) {
                    current = next.get();
                    told = true;
                    return current;
                }
            }
        }

        /** Who leads after {@code event}; empty when the event says nothing about it. */
        private Optional<Optional<Leader>> next(WatchEvent event) {
            long term = current.map(Leader::term).orElse(0L);
            switch (event.type()) {
                case SNAPSHOT:
                    return event.snapshot().map(Election::leaderOf);
                case ACQUIRED:
                    return Optional.of(Optional.of(new Leader(event.value().orElse(""), event.fencingToken())));
                case VALUE:
                    if (event.fencingToken() == term) {
                        return Optional.of(Optional.of(new Leader(event.value().orElse(""), term)));
                    }
                    return Optional.empty();
                case RELEASED:
                case EXPIRED:
                case REVOKED:
                    return event.fencingToken() == term ? Optional.of(Optional.empty()) : Optional.empty();
                default:
                    return Optional.empty();
            }
        }

        @Override
        public void close() {
            watcher.close();
        }
    }
}
