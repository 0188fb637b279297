// Several locks at once (LockAll: all or none, one token, a wait for the
// last lock; held through a streamed batch: renewed by the gateway past
// its lease, all released together, lost as one when one lock is, the
// rest given back by the gateway; in a session, ended with it), the
// upgrade and downgrade of a held lock, and the permits of a counting
// lock, against a real gateway.

package lockgate_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"lockgate"
)

// deleteLock releases key with token from outside, as another holder of
// the token may.
func deleteLock(t *testing.T, base, key, token string) {
	t.Helper()
	request, _ := http.NewRequest(http.MethodDelete, base+"/locks/"+key, nil)
	request.Header.Set("Lock-Token", token)
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	if response.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE %s: %d", key, response.StatusCode)
	}
}

func TestLockAllTakesEveryLockForOneTokenAndReleasesThemAll(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	a, b, pool := uniqueKey(t)+":a", uniqueKey(t)+":b", uniqueKey(t)+":pool"
	set, err := gw.LockAll(ctx, []lockgate.BatchLock{{Key: a}, {Key: b, Shared: true}, {Key: pool, Limit: 3, Permits: 2}},
		lockgate.TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	locks := set.Locks()
	if len(locks) != 3 || locks[0].Key != a || locks[1].Mode != "shared" || locks[2].Mode != "exclusive" {
		t.Fatalf("locks: %+v", locks)
	}
	for _, key := range []string{a, b, pool} {
		status, err := gw.Inspect(ctx, key)
		if err != nil || status == nil || status.FencingToken != set.FencingToken(key) {
			t.Fatalf("%s: %+v %v (set's fencing token %d)", key, status, err, set.FencingToken(key))
		}
	}
	status, _ := gw.Inspect(ctx, pool)
	if status.Leases[0].Permits != 2 {
		t.Fatalf("permits of the pool: %+v", status.Leases[0])
	}
	if _, err := gw.TryLock(ctx, a); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("a lock of the set was taken again: %v", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{a, b, pool} {
		if holders(t, gw, key) != 0 {
			t.Fatalf("%s still held after Release", key)
		}
	}
	if !errors.Is(set.Err(), lockgate.ErrReleased) || set.Context().Err() == nil {
		t.Fatalf("after Release: %v", set.Err())
	}
}

func TestLockAllIsAllOrNoneAndWaitsForItsLastLock(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	other := mustLock(t, gw, b)
	_, err := gw.LockAll(ctx, lockgate.Keys(a, b))
	var problem *lockgate.Problem
	if !errors.Is(err, lockgate.ErrLockHeld) || !errors.As(err, &problem) || problem.Key != b {
		t.Fatalf("over a held lock: %v", err)
	}
	if holders(t, gw, a) != 0 {
		t.Fatal("a refused batch left a lock held")
	}

	granted := make(chan *lockgate.LockSet, 1)
	go func() {
		set, err := gw.LockAll(ctx, lockgate.Keys(a, b), lockgate.Wait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		granted <- set
	}()
	eventually(t, 5*time.Second, "the batch waits", func() bool {
		status, err := gw.Inspect(ctx, b)
		return err == nil && status != nil && len(status.Waiters) > 0
	})
	if holders(t, gw, a) != 0 {
		t.Fatal("part of a waiting batch is held")
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case set := <-granted:
		if set == nil {
			t.FailNow()
		}
		defer set.Release(ctx)
		if set.FencingToken(b) <= other.FencingToken() || set.Waited() <= 0 {
			t.Fatalf("fencing token %d after %d, waited %v", set.FencingToken(b), other.FencingToken(), set.Waited())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting batch was not granted")
	}
}

// lostSet checks that set was lost because of key (or, for key "", of
// no one lock), for reason, and that the gateway gave back every lock.
func lostSet(t *testing.T, gw *lockgate.Gateway, set *lockgate.LockSet, key, reason string) {
	t.Helper()
	doneWithin(t, set.Done(), 5*time.Second, "the set's context is cancelled")
	var lost *lockgate.LostError
	if err := set.Err(); !errors.Is(err, lockgate.ErrLockLost) || !errors.As(err, &lost) || lost.Reason != reason {
		t.Fatalf("the set's Err: %v (want %s)", err, reason)
	}
	if key != "" && lost.Key != key {
		t.Fatalf("the loss names %q, not %q", lost.Key, key)
	}
	if set.Context().Err() == nil || set.Remaining() != 0 {
		t.Fatalf("a lost set: context %v, %v left", set.Context().Err(), set.Remaining())
	}
	for _, lock := range set.Locks() {
		eventually(t, 3*time.Second, lock.Key+" is given back", func() bool { return holders(t, gw, lock.Key) == 0 })
	}
	if err := set.Release(context.Background()); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("Release of a lost set: %v", err)
	}
}

func TestASetIsRenewedByTheGatewayPastItsLease(t *testing.T) {
	_, gateway := sharedStack(t)
	// Every request the client sends goes through the proxy.
	through := newProxy(t, gateway.addr)
	gw := lockgate.New(through.url())
	ctx := context.Background()
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	const ttl = 600 * time.Millisecond
	set, err := gw.LockAll(ctx, lockgate.Keys(a, b), lockgate.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	granted := set.ExpiresAt()
	if set.TTL() != ttl || set.Remaining() <= 0 || set.Remaining() > ttl {
		t.Fatalf("the grant: ttl %v, %v left", set.TTL(), set.Remaining())
	}
	time.Sleep(3 * ttl) // three leases: only renewals keep the locks
	inspect := sharedGateway(t)
	if set.Err() != nil || holders(t, inspect, a) != 1 || holders(t, inspect, b) != 1 {
		t.Fatalf("not kept past its TTL: %v", set.Err())
	}
	if !set.ExpiresAt().After(granted.Add(ttl)) || set.Remaining() <= 0 {
		t.Fatalf("renewals not heard: expires at %v (granted until %v), %v left", set.ExpiresAt(), granted, set.Remaining())
	}
	// The gateway renewed them: the client sent one request, the streamed batch.
	sent := strings.Join(through.sentRequests(), "")
	heads := regexp.MustCompile(`(?m)^[A-Z]+ /\S* HTTP/1\.1\r$`).FindAllString(sent, -1)
	if len(heads) != 1 || !strings.HasPrefix(heads[0], "POST /locks/batch ") ||
		!strings.Contains(strings.ToLower(sent), "accept: text/event-stream") {
		t.Fatalf("the client sent %q", heads)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holders(t, inspect, a)+holders(t, inspect, b) != 0 {
		t.Fatal("a lock of the set is held after Release")
	}
}

func TestARevokedLockLosesTheSetAndTheGatewayGivesBackTheRest(t *testing.T) {
	gw := sharedGateway(t)
	admin := sharedGateway(t, lockgate.WithAPIKey(adminToken))
	a, b, c := uniqueKey(t)+":a", uniqueKey(t)+":b", uniqueKey(t)+":c"
	set, err := gw.LockAll(context.Background(), lockgate.Keys(a, b, c), lockgate.TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	work := make(chan error, 1)
	go func() {
		// Work that honours the set's context stops when the set is lost.
		<-set.Context().Done()
		work <- set.Context().Err()
	}()
	if err := admin.Revoke(context.Background(), b, set.FencingToken(b)); err != nil {
		t.Fatal(err)
	}
	lostSet(t, gw, set, b, lockgate.ReasonRevoked)
	if err := <-work; !errors.Is(err, context.Canceled) {
		t.Fatalf("the work saw %v", err)
	}
}

func TestASetReleasedElsewhereWithItsTokenIsLost(t *testing.T) {
	_, gateway := sharedStack(t)
	gw := lockgate.New(gateway.url())
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	set, err := gw.LockAll(context.Background(), lockgate.Keys(a, b))
	if err != nil {
		t.Fatal(err)
	}
	deleteLock(t, gateway.url(), b, set.Token()) // someone with the token let one go
	lostSet(t, gw, set, b, lockgate.ReasonReleasedElsewhere)
}

func TestASetWhoseKeyIsDeletedInRedisIsLost(t *testing.T) {
	redis, gateway := sharedStack(t)
	gw := lockgate.New(gateway.url())
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	set, err := gw.LockAll(context.Background(), lockgate.Keys(a, b), lockgate.TTL(lossTTL))
	if err != nil {
		t.Fatal(err)
	}
	if n := redis.cli(t, "DEL", lockRedisKey(a)); n != "1" {
		t.Fatalf("DEL %s: %s", lockRedisKey(a), n)
	}
	lostSet(t, gw, set, a, lockgate.ReasonLockGone)
}

func TestASetWhoseConnectionBreaksIsLostAndGivenBack(t *testing.T) {
	_, gateway := sharedStack(t)
	through := newProxy(t, gateway.addr)
	gw := lockgate.New(through.url())
	set, err := gw.LockAll(context.Background(), lockgate.Keys(uniqueKey(t)+":a", uniqueKey(t)+":b"), lockgate.TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	through.cut() // the gateway sees the connection close: it releases them all
	lostSet(t, sharedGateway(t), set, "", lockgate.ReasonConnectionLost)
}

func TestASetIsLostByTheClientsClockWhenItsGatewayFallsSilent(t *testing.T) {
	redis, _ := sharedStack(t)
	silent := ownGateway(t, redis)
	set, err := lockgate.New(silent.url()).LockAll(context.Background(), lockgate.Keys(uniqueKey(t)+":a", uniqueKey(t)+":b"),
		lockgate.TTL(lossTTL))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	silent.freeze() // the stream stays open, and nothing comes through it
	took := doneWithin(t, set.Done(), 2*lossTTL, "the set's context is cancelled")
	var lost *lockgate.LostError
	if !errors.As(set.Err(), &lost) || lost.Reason != lockgate.ReasonLeaseExpired {
		t.Fatalf("the set's Err: %v", set.Err())
	}
	if took < lossTTL/2 || took > lossTTL+lossTTL/4 {
		t.Fatalf("lost %v after the freeze of a %v lease", took, lossTTL)
	}
	silent.thaw()
}

func TestAPlainGrantOfAGatewayThatDoesNotStreamBatchesIsGivenBack(t *testing.T) {
	_, gateway := sharedStack(t)
	// As a gateway older than the streamed batch answers: the proxy asks
	// the real one for a plain batch.
	plain := newProxy(t, gateway.addr)
	plain.rewriting(func(sent []byte) []byte {
		return regexp.MustCompile(`(?i)accept: text/event-stream`).ReplaceAll(sent, []byte("Accept: application/json"))
	})
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	_, err := lockgate.New(plain.url()).LockAll(context.Background(), lockgate.Keys(a, b), lockgate.TTL(30*time.Second))
	if !errors.Is(err, lockgate.ErrUnavailable) || !strings.Contains(err.Error(), "without streaming it") {
		t.Fatalf("LockAll through a gateway that does not stream batches: %v", err)
	}
	gw := sharedGateway(t)
	if holders(t, gw, a)+holders(t, gw, b) != 0 {
		t.Fatal("the plain grant was left held")
	}
}

func TestASetInASessionEndsWithIt(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	sess := openSession(t, gw, lockgate.SessionTTL(time.Second))
	set, err := sess.LockAll(ctx, lockgate.Keys(a, b))
	if err != nil {
		t.Fatal(err)
	}
	status, _ := gw.Inspect(ctx, a)
	if status == nil || status.Leases[0].Session == "" || set.TTL() != sess.TTL() {
		t.Fatalf("not in the session: %+v, ttl %v", status, set.TTL())
	}
	time.Sleep(2500 * time.Millisecond) // the session's keepalive keeps them
	if set.Err() != nil || holders(t, gw, a) != 1 {
		t.Fatalf("the set did not last with its session: %v", set.Err())
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Every lock is free when Close returns, and the set was given back.
	if holders(t, gw, a)+holders(t, gw, b) != 0 {
		t.Fatal("the session's end left a lock of the set held")
	}
	if !errors.Is(set.Err(), lockgate.ErrReleased) || set.Context().Err() == nil {
		t.Fatalf("the set after Close: %v", set.Err())
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release after the session's Close: %v", err)
	}
	if _, err := sess.LockAll(ctx, lockgate.Keys(a)); !errors.Is(err, lockgate.ErrSessionNotFound) {
		t.Fatalf("a set in a closed session: %v", err)
	}
}

func TestASetInASessionDeletedElsewhereIsLost(t *testing.T) {
	gw := sharedGateway(t)
	sess := openSession(t, gw)
	set, err := sess.LockAll(context.Background(), lockgate.Keys(uniqueKey(t)+":a", uniqueKey(t)+":b"))
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := sessionRequest(t, gw, http.MethodDelete, sess.ID()); status != http.StatusNoContent {
		t.Fatalf("DELETE /sessions/{id}: %d", status)
	}
	lostSet(t, gw, set, "", lockgate.ReasonSessionEnded)
	var sessionLost *lockgate.SessionLostError
	if !errors.As(set.Err(), &sessionLost) || sessionLost.Reason != lockgate.ReasonSessionDeleted {
		t.Fatalf("the set's loss does not unwrap to its session's: %v", set.Err())
	}
}

func TestASetInASessionOpenedElsewhereEndsWithItsStream(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	sess := openSession(t, gw)
	// Another process, handed the id, hangs its set on the session: only
	// the set's own stream can tell it that the session ended.
	elsewhere := sharedGateway(t)
	set, err := elsewhere.LockAll(ctx, lockgate.Keys(uniqueKey(t)+":a", uniqueKey(t)+":b"), lockgate.InSession(sess.ID()))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	lostSet(t, gw, set, "", lockgate.ReasonSessionEnded)
}

func TestReleaseOfASetWhoseFirstLockIsGoneSaysItWasLost(t *testing.T) {
	redis, gateway := sharedStack(t)
	gw := lockgate.New(gateway.url())
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	set, err := gw.LockAll(context.Background(), lockgate.Keys(a, b), lockgate.TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The first lock vanishes and Release comes at once, before a renewal
	// can find it gone: Release says the set was lost, and frees the rest.
	redis.cli(t, "DEL", lockRedisKey(a))
	var lost *lockgate.LostError
	if err := set.Release(context.Background()); !errors.As(err, &lost) || lost.Key != a {
		t.Fatalf("Release of a set whose first lock was gone: %v", err)
	}
	for _, key := range []string{a, b} {
		if holders(t, gw, key) != 0 {
			t.Fatalf("%s is held after Release", key)
		}
	}
}

func TestUpgradeAndDowngradeOfAStreamedLock(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	key := uniqueKey(t)
	lock := mustLock(t, gw, key, lockgate.Shared(), lockgate.TTL(3*time.Second))
	shared := lock.FencingToken()
	if err := lock.Upgrade(ctx); err != nil {
		t.Fatal(err)
	}
	if lock.Mode() != "exclusive" || lock.FencingToken() <= shared {
		t.Fatalf("upgraded: %s, fencing token %d after %d", lock.Mode(), lock.FencingToken(), shared)
	}
	if _, err := gw.TryLock(ctx, key, lockgate.Shared()); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("a reader beside an upgraded lock: %v", err)
	}
	upgraded := lock.FencingToken()
	if err := lock.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	if lock.Mode() != "shared" || lock.FencingToken() != upgraded {
		t.Fatalf("downgraded: %s, fencing token %d", lock.Mode(), lock.FencingToken())
	}
	reader := mustLock(t, gw, key, lockgate.Shared())
	if holders(t, gw, key) != 2 {
		t.Fatal("the downgraded lock let no reader in")
	}
	_ = reader.Release(ctx)
	time.Sleep(1200 * time.Millisecond) // the stream still renews the changed hold
	if lock.Err() != nil {
		t.Fatal(lock.Err())
	}
}

func TestASecondUpgraderIsRefusedAsADeadlock(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	key := uniqueKey(t)
	first := mustLock(t, gw, key, lockgate.Shared())
	second := mustLock(t, gw, key, lockgate.Shared())
	upgraded := make(chan error, 1)
	go func() { upgraded <- first.Upgrade(ctx, lockgate.Wait(10*time.Second)) }()
	time.Sleep(300 * time.Millisecond)
	err := second.Upgrade(ctx, lockgate.Wait(5*time.Second))
	var deadlock *lockgate.DeadlockError
	if !errors.Is(err, lockgate.ErrDeadlock) || !errors.As(err, &deadlock) {
		t.Fatalf("the second upgrade: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-upgraded:
		if err != nil || first.Mode() != "exclusive" || first.FencingToken() <= second.FencingToken() {
			t.Fatalf("the first upgrade: %v, %s", err, first.Mode())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first upgrade was not granted")
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}

	third := mustLock(t, gw, key, lockgate.Shared())
	mustLock(t, gw, key, lockgate.Shared())
	if err := third.Upgrade(ctx, lockgate.Wait(200*time.Millisecond)); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("an upgrade whose wait ran out: %v", err)
	}
	if third.Mode() != "shared" || third.Err() != nil || holders(t, gw, key) != 2 {
		t.Fatalf("the timed-out upgrader lost its place: %s %v", third.Mode(), third.Err())
	}
}

func TestPermitsTakeSeveralPlacesOfACountingLock(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	key := uniqueKey(t)
	big := mustLock(t, gw, key, lockgate.Limit(5), lockgate.Permits(3))
	if big.Permits() != 3 {
		t.Fatalf("Permits: %d", big.Permits())
	}
	if _, err := gw.TryLock(ctx, key, lockgate.Limit(5), lockgate.Permits(3)); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("3 more of 5 places: %v", err)
	}
	mustLock(t, gw, key, lockgate.Limit(5), lockgate.Permits(2))
	status, err := gw.Inspect(ctx, key)
	if err != nil || status == nil || len(status.Leases) != 2 {
		t.Fatalf("status: %+v %v", status, err)
	}
	if sum := status.Leases[0].Permits + status.Leases[1].Permits; sum != 5 || status.Leases[0].Permits != 3 {
		t.Fatalf("permits shown: %+v", status.Leases)
	}
}
