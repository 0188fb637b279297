// Streamed locks against a real gateway: acquire, wait, refusal, release on
// every path, the lease held past its TTL by the stream, lock kinds, and
// many goroutines sharing one Gateway.

package lockgate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockgate"
)

func sharedGateway(t *testing.T, options ...lockgate.Option) *lockgate.Gateway {
	_, gateway := sharedStack(t)
	return lockgate.New(gateway.url(), options...)
}

// mustLock takes key, failing the test if it cannot.
func mustLock(t *testing.T, gw *lockgate.Gateway, key string, options ...lockgate.LockOption) *lockgate.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := gw.Lock(ctx, key, options...)
	if err != nil {
		t.Fatalf("taking %s: %v", key, err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// nextGrantIsLater takes the lock after before, and checks that its
// fencing token is larger.
func nextGrantIsLater(t *testing.T, gw *lockgate.Gateway, before *lockgate.Lock) {
	t.Helper()
	next := mustLock(t, gw, before.Key())
	if next.FencingToken() <= before.FencingToken() {
		t.Fatalf("fencing token %d after %d", next.FencingToken(), before.FencingToken())
	}
}

// queueEmpties waits until nobody waits for key (a waiter that left is
// gone from the queue within 1 s).
func queueEmpties(t *testing.T, gw *lockgate.Gateway, key string) {
	t.Helper()
	eventually(t, 3*time.Second, "the queue empties", func() bool {
		status, err := gw.Inspect(context.Background(), key)
		return err == nil && status != nil && len(status.Waiters) == 0
	})
}

// holders is how many hold key now (0 when it is free).
func holders(t *testing.T, gw *lockgate.Gateway, key string) int {
	t.Helper()
	status, err := gw.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("inspecting %s: %v", key, err)
	}
	if status == nil {
		return 0
	}
	return status.Holders
}

func TestLockIsGrantedAndReleased(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	ctx := context.Background()

	lock, err := gw.Lock(ctx, key, lockgate.TTL(5*time.Second), lockgate.Value("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	if lock.Key() != key || lock.Token() == "" || lock.FencingToken() == 0 || !lock.Streamed() {
		t.Fatalf("grant: key %q token %q fencing %d streamed %v", lock.Key(), lock.Token(), lock.FencingToken(), lock.Streamed())
	}
	if lock.TTL() != 5*time.Second || lock.Err() != nil || lock.Remaining() <= 0 || lock.Remaining() > 5*time.Second {
		t.Fatalf("lease: ttl %v err %v remaining %v", lock.TTL(), lock.Err(), lock.Remaining())
	}
	status, err := gw.Inspect(ctx, key)
	if err != nil || status == nil {
		t.Fatalf("inspect: %v, %v", status, err)
	}
	// The fencing token is a large integer (about the Redis clock in µs):
	// the gateway's and the lock's must agree to the last digit.
	if status.FencingToken != lock.FencingToken() || len(status.Leases) != 1 || status.Leases[0].Value != "host-a" {
		t.Fatalf("inspect: %+v, lock's fencing token %d", status, lock.FencingToken())
	}

	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holders(t, gw, key) != 0 {
		t.Fatal("still held after Release returned")
	}
	select {
	case <-lock.Context().Done():
	default:
		t.Fatal("the lock's context is not done after Release")
	}
	if !errors.Is(lock.Err(), lockgate.ErrReleased) || errors.Is(lock.Err(), lockgate.ErrLockLost) {
		t.Fatalf("Err after Release: %v", lock.Err())
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("a second Release: %v", err)
	}

	nextGrantIsLater(t, gw, lock)
}

func TestTryLockOnAHeldLockIsRefusedWithLockHeld(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	holder := mustLock(t, gw, key, lockgate.TTL(20*time.Second))

	start := time.Now()
	_, err := gw.TryLock(context.Background(), key)
	if !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("TryLock took %v", time.Since(start))
	}
	var problem *lockgate.Problem
	if !errors.As(err, &problem) || problem.Slug() != "lock-held" || problem.Status != 409 || problem.Key != key {
		t.Fatalf("problem %+v", problem)
	}
	if problem.RetryAfter <= 0 || problem.RetryAfter > 20*time.Second {
		t.Fatalf("retry after %v", problem.RetryAfter)
	}
	if holder.Err() != nil {
		t.Fatalf("the holder: %v", holder.Err())
	}
}

func TestLockWaitsUntilTheHolderReleases(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	first := mustLock(t, gw, key)

	got := make(chan *lockgate.Lock, 1)
	failed := make(chan error, 1)
	go func() {
		// No Wait: Lock waits until its context is done.
		lock, err := gw.Lock(context.Background(), key)
		if err != nil {
			failed <- err
			return
		}
		got <- lock
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("granted while another held it")
	case err := <-failed:
		t.Fatal(err)
	default:
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case second := <-got:
		defer second.Release(context.Background())
		if second.FencingToken() <= first.FencingToken() || second.Waited() < 200*time.Millisecond {
			t.Fatalf("second grant: fencing %d (first %d), waited %v", second.FencingToken(), first.FencingToken(), second.Waited())
		}
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted after the release")
	}
}

func TestLockGivesUpWhenItsWaitRunsOut(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	mustLock(t, gw, key)

	start := time.Now()
	_, err := gw.Lock(context.Background(), key, lockgate.Wait(400*time.Millisecond))
	waited := time.Since(start)
	if !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("after the wait: %v", err)
	}
	if waited < 350*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("gave up after %v for a 400 ms wait", waited)
	}

	// A context that ends first ends the wait with its own error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = gw.Lock(ctx, key, lockgate.Wait(10*time.Second))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with the context's deadline first: %v", err)
	}
}

func TestACancelledWaiterIsNeverGranted(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	holder := mustLock(t, gw, key)

	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan int, 8)
	done := make(chan error, 1)
	go func() {
		_, err := gw.Lock(ctx, key, lockgate.OnQueued(func(position int) { queued <- position }))
		done <- err
	}()
	select {
	case position := <-queued:
		if position != 1 {
			t.Fatalf("queued at %d", position)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not queued")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait returned %v", err)
	}
	// The waiter left the queue: once released the lock stays free.
	queueEmpties(t, gw, key)
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := holders(t, gw, key); n != 0 {
		t.Fatalf("%d holders after the only holder left", n)
	}
}

func TestAStreamedLockOutlivesItsTTL(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	lock := mustLock(t, gw, key, lockgate.TTL(300*time.Millisecond))

	time.Sleep(1500 * time.Millisecond) // five leases
	if err := lock.Err(); err != nil {
		t.Fatalf("lost while the stream renewed it: %v", err)
	}
	status, err := gw.Inspect(context.Background(), key)
	if err != nil || status == nil || status.FencingToken != lock.FencingToken() {
		t.Fatalf("after five leases: %+v, %v", status, err)
	}
	if lock.ExpiresAt().Before(time.Now().Add(-time.Second)) {
		t.Fatalf("renewals not heard: the lease ends at %v", lock.ExpiresAt())
	}
}

func TestTheAcquiringContextBoundsTheAcquisitionOnly(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	type traceID struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), traceID{}, "t-1"))
	lock, err := gw.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(200 * time.Millisecond)
	if lock.Err() != nil || lock.Context().Err() != nil {
		t.Fatalf("the acquisition's context ended the hold: %v", lock.Err())
	}
	if lock.Context().Value(traceID{}) != "t-1" {
		t.Fatal("the lock's context lost the acquisition's values")
	}
	// A Release whose context is already done still frees the lock: closing
	// the stream is a release too.
	_ = lock.Release(ctx)
	eventually(t, 3*time.Second, "the lock is free", func() bool { return holders(t, gw, key) == 0 })
}

func TestReleaseRunsOnEveryPathIncludingAPanic(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)

	work := func() {
		lock, err := gw.Lock(context.Background(), key)
		if err != nil {
			t.Error(err)
			return
		}
		defer lock.Release(context.Background())
		panic("the work failed")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		work()
	}()
	if holders(t, gw, key) != 0 {
		t.Fatal("the lock is held after the panicking work's deferred Release")
	}
	lock, err := gw.TryLock(context.Background(), key)
	if err != nil {
		t.Fatalf("the next owner: %v", err)
	}
	_ = lock.Release(context.Background())
}

func TestSharedAndCountingLocks(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()

	readers := uniqueKey(t) + ":rw"
	a := mustLock(t, gw, readers, lockgate.Shared())
	b := mustLock(t, gw, readers, lockgate.Shared())
	if a.Mode() != "shared" || a.FencingToken() == b.FencingToken() {
		t.Fatalf("readers: %s %d %d", a.Mode(), a.FencingToken(), b.FencingToken())
	}
	if _, err := gw.TryLock(ctx, readers); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("a writer beside readers: %v", err)
	}

	pool := uniqueKey(t) + ":pool"
	mustLock(t, gw, pool, lockgate.Limit(2))
	mustLock(t, gw, pool, lockgate.Limit(2))
	if _, err := gw.TryLock(ctx, pool, lockgate.Limit(2)); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("a third holder of two places: %v", err)
	}
	_, err := gw.TryLock(ctx, pool, lockgate.Limit(3))
	var problem *lockgate.Problem
	if !errors.Is(err, lockgate.ErrInvalidRequest) || !errors.As(err, &problem) || problem.Slug() != "limit-mismatch" {
		t.Fatalf("another limit: %v", err)
	}
}

func TestSetValueIsSeenByReaders(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	lock := mustLock(t, gw, key, lockgate.Value("10.0.0.1:80"))
	if err := lock.SetValue(context.Background(), "10.0.0.2:80"); err != nil {
		t.Fatal(err)
	}
	status, err := gw.Inspect(context.Background(), key)
	if err != nil || status.Leases[0].Value != "10.0.0.2:80" || lock.Value() != "10.0.0.2:80" {
		t.Fatalf("%+v, %v, %q", status, err, lock.Value())
	}
	if err := lock.Extend(context.Background(), time.Second); !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Fatalf("Extend of a streamed lock: %v", err)
	}
}

func TestInvalidRequestsAreRefused(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	_, err := gw.TryLock(ctx, "no spaces allowed")
	var problem *lockgate.Problem
	if !errors.Is(err, lockgate.ErrInvalidRequest) || !errors.As(err, &problem) || problem.Slug() != "invalid-key" {
		t.Fatalf("an invalid key: %v", err)
	}
	_, err = gw.TryLock(ctx, uniqueKey(t), lockgate.TTL(time.Millisecond))
	var field string
	if !errors.As(err, &problem) || !problem.Member("field", &field) || field != "ttl_ms" {
		t.Fatalf("a TTL out of range: %v", err)
	}
	if _, err := gw.TryLock(ctx, uniqueKey(t), lockgate.IdempotencyKey("k")); !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Fatalf("an idempotency key on a streamed lock: %v", err)
	}
	unreachable := lockgate.New("http://127.0.0.1:1", lockgate.WithTimeout(time.Second))
	if _, err := unreachable.TryLock(ctx, "k"); !errors.Is(err, lockgate.ErrUnavailable) {
		t.Fatalf("an unreachable gateway: %v", err)
	}
}

func TestAPIKey(t *testing.T) {
	redis, _ := sharedStack(t)
	gateway := ownGateway(t, redis, "--api-keys", "key-1,key-2")
	key := uniqueKey(t)
	_, err := lockgate.New(gateway.url()).TryLock(context.Background(), key)
	var problem *lockgate.Problem
	if !errors.As(err, &problem) || problem.Slug() != "unauthorized" || !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Fatalf("without the key: %v", err)
	}
	lock, err := lockgate.New(gateway.url(), lockgate.WithAPIKey("key-2")).TryLock(context.Background(), key)
	if err != nil {
		t.Fatalf("with the key: %v", err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestManyGoroutinesShareOneGatewayAndTakeTurns(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	const workers, rounds = 8, 5
	var inside, most, total atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				lock, err := gw.Lock(context.Background(), key, lockgate.Wait(30*time.Second))
				if err != nil {
					errs <- err
					return
				}
				now := inside.Add(1)
				for {
					seen := most.Load()
					if now <= seen || most.CompareAndSwap(seen, now) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				total.Add(1)
				if err := lock.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most.Load() != 1 || total.Load() != workers*rounds {
		t.Fatalf("at most %d holders at once, %d turns", most.Load(), total.Load())
	}
}
