// Several locks at once (LockAll: all or none, one token, a wait for the
// last lock, all released together, lost when one is), the upgrade and
// downgrade of a held lock, and the permits of a counting lock, against a
// real gateway.

package lockgate_test

import (
	"context"
	"errors"
	"net/http"
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

func TestLockAllOutlivesItsTTLAndIsLostWhenOneLockGoes(t *testing.T) {
	_, gateway := sharedStack(t)
	gw := lockgate.New(gateway.url())
	ctx := context.Background()
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	set, err := gw.LockAll(ctx, lockgate.Keys(a, b), lockgate.TTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // over two leases: only the set's renewals keep them
	if set.Err() != nil || holders(t, gw, a) != 1 || holders(t, gw, b) != 1 {
		t.Fatalf("not kept past its TTL: %v", set.Err())
	}
	deleteLock(t, gateway.url(), b, set.Token()) // someone with the token let one go
	select {
	case <-set.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set was not found lost")
	}
	var lostErr *lockgate.LostError
	if !errors.As(set.Err(), &lostErr) || lostErr.Reason != lockgate.ReasonLockGone || !errors.Is(set.Err(), lockgate.ErrLockLost) {
		t.Fatalf("lost with %v", set.Err())
	}
	if err := set.Release(ctx); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("Release of a lost set: %v", err)
	}
	if holders(t, gw, a) != 0 {
		t.Fatal("the lost set's other lock was not released")
	}
}

func TestLockAllInASessionEndsWithIt(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	a, b := uniqueKey(t)+":a", uniqueKey(t)+":b"
	sess := openSession(t, gw, lockgate.SessionTTL(2*time.Second))
	set, err := sess.LockAll(ctx, lockgate.Keys(a, b))
	if err != nil {
		t.Fatal(err)
	}
	status, _ := gw.Inspect(ctx, a)
	if status == nil || status.Leases[0].Session == "" {
		t.Fatalf("not in the session: %+v", status)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-set.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set outlived its session")
	}
	if holders(t, gw, a)+holders(t, gw, b) != 0 {
		t.Fatal("the session's end left a lock of the set held")
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
