// Losing a held lock: its key deleted in Redis, revoked by an operator,
// Redis frozen past the lease, the gateway killed or frozen mid-hold. Each
// must cancel the lock's context with a *LostError within about a lease.

package lockgate_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"lockgate"
)

// lossTTL is the lease of the locks these tests lose: short, so that a
// loss noticed at the lease's end comes soon.
const lossTTL = time.Second

// lostReason checks that the lock was lost, and returns why.
func lostReason(t *testing.T, lock *lockgate.Lock) string {
	t.Helper()
	err := lock.Err()
	var lost *lockgate.LostError
	if !errors.Is(err, lockgate.ErrLockLost) || !errors.As(err, &lost) {
		t.Fatalf("Err of a lost lock: %v", err)
	}
	if lost.Key != lock.Key() || lock.Context().Err() == nil {
		t.Fatalf("lost error %+v, context %v", lost, lock.Context().Err())
	}
	if lock.Remaining() != 0 {
		t.Fatalf("a lost lock has %v left", lock.Remaining())
	}
	// Release of a lost lock gives nothing back and says it was lost.
	if err := lock.Release(context.Background()); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("Release of a lost lock: %v", err)
	}
	return lost.Reason
}

func TestALockWhoseKeyIsDeletedInRedisIsLost(t *testing.T) {
	redis, gateway := sharedStack(t)
	gw := lockgate.New(gateway.url())
	key := uniqueKey(t)
	lock := mustLock(t, gw, key, lockgate.TTL(lossTTL))

	if n := redis.cli(t, "DEL", lockRedisKey(key)); n != "1" {
		t.Fatalf("DEL %s: %s", lockRedisKey(key), n)
	}
	took := doneWithin(t, lock.Done(), 2*lossTTL, "the context is cancelled")
	if reason := lostReason(t, lock); reason != lockgate.ReasonLockGone {
		t.Fatalf("reason %q", reason)
	}
	t.Logf("lost %v after the DEL", took)
}

func TestARevokedLockIsLost(t *testing.T) {
	gw := sharedGateway(t)
	admin := sharedGateway(t, lockgate.WithAPIKey(adminToken))
	key := uniqueKey(t)
	lock := mustLock(t, gw, key, lockgate.TTL(30*time.Second))

	if err := admin.Revoke(context.Background(), uniqueKey(t), 0); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("revoking a lock that is not held: %v", err)
	}
	if err := gw.Revoke(context.Background(), key, 0); !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Fatalf("revoking without the admin token: %v", err)
	}
	if err := admin.Revoke(context.Background(), key, lock.FencingToken()); err != nil {
		t.Fatal(err)
	}
	doneWithin(t, lock.Done(), 2*time.Second, "the context is cancelled")
	if reason := lostReason(t, lock); reason != lockgate.ReasonRevoked {
		t.Fatalf("reason %q", reason)
	}
	nextGrantIsLater(t, gw, lock)
}

func TestRevokingOneHoldByItsFencingTokenLeavesAnotherHoldersNewerOne(t *testing.T) {
	gw := sharedGateway(t)
	admin := sharedGateway(t, lockgate.WithAPIKey(adminToken))
	ctx := context.Background()

	// Two holders of a counting lock: only the revoked hold ends.
	pool := uniqueKey(t)
	older := mustLock(t, gw, pool, lockgate.Limit(2))
	newer := mustLock(t, gw, pool, lockgate.Limit(2))
	if err := admin.Revoke(ctx, pool, older.FencingToken()); err != nil {
		t.Fatal(err)
	}
	doneWithin(t, older.Done(), 2*time.Second, "the revoked holder's context is cancelled")
	if reason := lostReason(t, older); reason != lockgate.ReasonRevoked {
		t.Fatalf("reason %q", reason)
	}
	survives := func(lock *lockgate.Lock) {
		t.Helper()
		status, err := gw.Inspect(ctx, lock.Key())
		if err != nil || status == nil || status.Holders != 1 || status.Leases[0].FencingToken != lock.FencingToken() {
			t.Fatalf("the other hold: %+v, %v", status, err)
		}
		if lock.Err() != nil {
			t.Fatalf("the other holder: %v", lock.Err())
		}
	}
	time.Sleep(200 * time.Millisecond) // a revoked stream is told at once; let any wrong news arrive
	survives(newer)
	// The same revocation again finds that hold gone, and ends nothing else.
	if err := admin.Revoke(ctx, pool, older.FencingToken()); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("revoking a hold that is gone: %v", err)
	}
	survives(newer)

	// A mutex: the fencing token an operator saw on the former holder never
	// ends the next holder's hold.
	mutex := uniqueKey(t)
	former := mustLock(t, gw, mutex)
	if err := former.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := mustLock(t, gw, mutex)
	if err := admin.Revoke(ctx, mutex, former.FencingToken()); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("revoking the former holder's hold: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	survives(next)
}

func TestALockIsLostWhenRedisIsFrozenPastTheLease(t *testing.T) {
	redis := ownRedis(t)
	gateway := ownGateway(t, redis)
	gw := lockgate.New(gateway.url())
	lock := mustLock(t, gw, uniqueKey(t), lockgate.TTL(lossTTL))

	redis.freeze()
	defer redis.thaw()
	// The last renewal before the freeze was at most a third of the lease
	// before it: the lease ends within a lease of the freeze.
	took := doneWithin(t, lock.Done(), 2*lossTTL, "the context is cancelled")
	reason := lostReason(t, lock)
	if reason != lockgate.ReasonBackendUnavailable && reason != lockgate.ReasonLeaseExpired {
		t.Fatalf("reason %q", reason)
	}
	t.Logf("lost %v after the freeze (%s)", took, reason)
}

func TestALockIsLostAtOnceWhenItsGatewayIsKilled(t *testing.T) {
	redis, _ := sharedStack(t)
	doomed := ownGateway(t, redis)
	gw := lockgate.New(doomed.url())
	key := uniqueKey(t)
	const ttl = 3 * time.Second
	lock := mustLock(t, gw, key, lockgate.TTL(ttl))

	work := make(chan error, 1)
	go func() {
		// Work that honours the lock's context stops when the lock is lost.
		<-lock.Context().Done()
		work <- lock.Context().Err()
	}()
	killed := time.Now()
	doomed.kill()
	doneWithin(t, lock.Done(), ttl/2, "a broken stream is a loss at once")
	took := time.Since(killed)
	if err := <-work; !errors.Is(err, context.Canceled) {
		t.Fatalf("the work saw %v", err)
	}
	if reason := lostReason(t, lock); reason != lockgate.ReasonConnectionLost {
		t.Fatalf("reason %q", reason)
	}
	t.Logf("lost %v after the kill", took)
}

func TestALockIsLostWhenItsGatewayShutsDown(t *testing.T) {
	redis, _ := sharedStack(t)
	stopping := ownGateway(t, redis)
	lock := mustLock(t, lockgate.New(stopping.url()), uniqueKey(t), lockgate.TTL(30*time.Second))
	stopping.stop() // SIGTERM: the gateway tells its streams as it stops
	doneWithin(t, lock.Done(), 5*time.Second, "the context is cancelled")
	if reason := lostReason(t, lock); reason != lockgate.ReasonShuttingDown {
		t.Fatalf("reason %q", reason)
	}
}

func TestALockIsLostByTheClientsClockWhenItsGatewayFallsSilent(t *testing.T) {
	redis, _ := sharedStack(t)
	silent := ownGateway(t, redis)
	gw := lockgate.New(silent.url())
	lock := mustLock(t, gw, uniqueKey(t), lockgate.TTL(lossTTL))

	time.Sleep(100 * time.Millisecond)
	silent.freeze() // the stream stays open, and nothing comes through it
	defer silent.thaw()
	took := doneWithin(t, lock.Done(), 2*lossTTL, "the context is cancelled")
	if reason := lostReason(t, lock); reason != lockgate.ReasonLeaseExpired {
		t.Fatalf("reason %q", reason)
	}
	// The last renewal came at most a third of the lease before the freeze,
	// and the deadline is never later than the lease's real end.
	if took < lossTTL/2 || took > lossTTL+lossTTL/4 {
		t.Fatalf("lost %v after the freeze of a %v lease", took, lossTTL)
	}
}

func TestALockReleasedWithItsTokenElsewhereIsLost(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	lock := mustLock(t, gw, key)

	// Another process, handed the token, releases it over plain HTTP.
	request, _ := http.NewRequest(http.MethodDelete, gw.URL()+"/locks/"+key, nil)
	request.Header.Set("Lock-Token", lock.Token())
	response, err := http.DefaultClient.Do(request)
	if err != nil || response.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE with the token: %v %v", response, err)
	}
	response.Body.Close()
	doneWithin(t, lock.Done(), 2*time.Second, "the context is cancelled")
	if reason := lostReason(t, lock); reason != lockgate.ReasonReleasedElsewhere {
		t.Fatalf("reason %q", reason)
	}
}
