package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.Optional;

/**
 * What a streamed lock ({@link Hold}) and a plain lease ({@link Lease}) share:
 * the grant (key, token, fencing token, mode, value) and the requests that
 * change a hold in place (value, upgrade, downgrade), whose answer that the
 * lock is gone is the hold's loss.
 */
abstract class Grant extends AbstractHeld implements HeldLock {
    final Gateway gateway;
    final String key;
    final String token;
    private final int permits;
    private final Duration waited;
    private volatile long fencingToken;
    private volatile LockMode mode;
    private volatile String value;

    Grant(Gateway gateway, Api.LockGrant grant, LockOptions options, Holding holding) {
        super(holding);
        this.gateway = gateway;
        this.key = grant.key();
        this.token = grant.token();
        this.fencingToken = grant.fencingToken();
        this.permits = options.permits();
        this.waited = Duration.ofMillis(grant.waitedMs());
        this.mode = options.mode();
        this.value = options.value();
    }

    @Override
    public String key() {
        return key;
    }

    @Override
    public long fencingToken() {
        return fencingToken;
    }

    @Override
    public String token() {
        return token;
    }

    @Override
    public LockMode mode() {
        return mode;
    }

    @Override
    public int permits() {
        return permits;
    }

    @Override
    public Optional<String> value() {
        return Optional.ofNullable(value);
    }

    @Override
    public Duration waited() {
        return waited;
    }

    @Override
    public Instant expiresAt() {
        return Instant.ofEpochMilli(holding.expiresAtMs());
    }

    @Override
    public Duration remaining() {
        Duration own = holding.remaining();
        return own == null ? Duration.ZERO : own;
    }

    @Override
    public void setValue(String value) {
        check();
        try {
            gateway.transport().call("PUT", Transport.lockPath(key, "/value"), new Api.ValueBody(token, value),
                    Map.of(), Duration.ZERO).decode(Api.LeaseRenewal.class);
        } catch (LockLostException | NotOwnerException e) {
            throw lostBy(key, e);
        }
        this.value = value;
    }

    @Override
    public void upgrade(Duration wait) throws InterruptedException {
        changeMode(LockMode.EXCLUSIVE, wait);
    }

    @Override
    public void downgrade() {
        try {
            changeMode(LockMode.SHARED, Duration.ZERO);
        } catch (InterruptedException e) {
            // A downgrade does not wait: only an interrupt during its request gets here.
            Thread.currentThread().interrupt();
            throw new GatewayUnavailableException("interrupted during a downgrade", e);
        }
    }

    private void changeMode(LockMode to, Duration wait) throws InterruptedException {
        check();
        Api.ModeChange change;
        try {
            change = gateway.transport().callInterruptibly("PUT", Transport.lockPath(key, "/mode"),
                    new Api.ModeBody(token, to, wait.toMillis()), Map.of(), wait).decode(Api.ModeChange.class);
        } catch (LockLostException | NotOwnerException e) {
            throw lostBy(key, e);
        }
        this.mode = change.mode();
        this.fencingToken = change.fencingToken();
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + "(" + key + ", fencing token " + fencingToken + ")";
    }
}
