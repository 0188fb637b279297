// Plain leases: Extend, the loss at the lease's end, re-entry with a
// token, and the acquisition retried with one Idempotency-Key after its
// answer was lost on the way.

package lockgate_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	"lockgate"
)

func TestALeaseLastsWhileExtendedAndIsLostAtItsEnd(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	ctx := context.Background()
	lease, err := gw.Lease(ctx, key, lockgate.TTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if lease.Streamed() || lease.Replayed() || lease.FencingToken() == 0 {
		t.Fatalf("lease: streamed %v replayed %v fencing %d", lease.Streamed(), lease.Replayed(), lease.FencingToken())
	}
	for i := 0; i < 3; i++ {
		time.Sleep(300 * time.Millisecond)
		if err := lease.Extend(ctx, 600*time.Millisecond); err != nil {
			t.Fatalf("extend %d: %v", i, err)
		}
	}
	if lease.Err() != nil || holders(t, gw, key) != 1 {
		t.Fatalf("after 900 ms of 600 ms leases, extended: %v", lease.Err())
	}

	// Not extended: the context is cancelled no later than the lease's end.
	took := doneWithin(t, lease.Done(), 2*time.Second, "the lease's context is cancelled")
	if took > 700*time.Millisecond {
		t.Fatalf("cancelled %v after the last 600 ms extension", took)
	}
	var lost *lockgate.LostError
	if !errors.As(lease.Err(), &lost) || lost.Reason != lockgate.ReasonLeaseExpired {
		t.Fatalf("Err: %v", lease.Err())
	}
	if err := lease.Extend(ctx, time.Second); !errors.Is(err, lockgate.ErrLockLost) {
		t.Fatalf("Extend of a lost lease: %v", err)
	}
}

func TestExtendOfALeaseThatIsGoneSaysItIsLost(t *testing.T) {
	redis, gateway := sharedStack(t)
	gw := lockgate.New(gateway.url())
	key := uniqueKey(t)
	lease, err := gw.Lease(context.Background(), key, lockgate.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	redis.cli(t, "DEL", lockRedisKey(key))
	err = lease.Extend(context.Background(), 10*time.Second)
	var lost *lockgate.LostError
	if !errors.As(err, &lost) || lost.Reason != lockgate.ReasonLockGone {
		t.Fatalf("Extend after the key was deleted: %v", err)
	}
	doneWithin(t, lease.Done(), time.Second, "the context is cancelled")
}

// fencingTokenIn reads the fencing token out of an answer the proxy
// dropped (an HTTP response, head and body).
func fencingTokenIn(t *testing.T, answer string) uint64 {
	t.Helper()
	match := regexp.MustCompile(`"fencing_token":(\d+)`).FindStringSubmatch(answer)
	if match == nil {
		t.Fatalf("no grant in the dropped answer: %q", answer)
	}
	token, err := strconv.ParseUint(match[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func TestALeaseWhoseAnswerIsLostIsRetriedAndGivenTheSameGrant(t *testing.T) {
	_, gateway := sharedStack(t)
	proxy := newProxy(t, gateway.addr)
	direct := lockgate.New(gateway.url())
	viaProxy := lockgate.New(proxy.url())
	key := uniqueKey(t)
	ctx := context.Background()

	proxy.dropAnswers(1)
	lease, err := viaProxy.Lease(ctx, key, lockgate.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dropped := proxy.droppedAnswers()
	if len(dropped) != 1 || fencingTokenIn(t, dropped[0]) != lease.FencingToken() {
		t.Fatalf("the grant %d is not the one the lost answer carried: %q", lease.FencingToken(), dropped)
	}
	if !lease.Replayed() {
		t.Fatal("the retry was not answered as a replay")
	}
	keys := regexp.MustCompile(`(?im)^idempotency-key: *(\S+)\r$`)
	var sent []string
	for _, request := range proxy.sentRequests() {
		if match := keys.FindStringSubmatch(request); match != nil {
			sent = append(sent, match[1])
		}
	}
	if len(sent) != 2 || sent[0] != sent[1] {
		t.Fatalf("Idempotency-Keys sent: %q", sent)
	}
	if n := holders(t, direct, key); n != 1 {
		t.Fatalf("%d holders: the retry made a second grant", n)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holders(t, direct, key); n != 0 {
		t.Fatal("the token the client got does not free the lock")
	}
}

func TestALeaseRetriedAcrossCallsWithItsIdempotencyKeyGetsTheSameGrant(t *testing.T) {
	_, gateway := sharedStack(t)
	proxy := newProxy(t, gateway.addr)
	key := uniqueKey(t)
	idempotencyKey := "go-test-" + key[len(key)-8:]
	ctx := context.Background()

	// Every attempt's answer is lost: the call fails, and the caller cannot
	// tell whether it holds the lock.
	proxy.dropAnswers(3)
	_, err := lockgate.New(proxy.url()).Lease(ctx, key, lockgate.TTL(10*time.Second), lockgate.IdempotencyKey(idempotencyKey))
	if !errors.Is(err, lockgate.ErrUnavailable) {
		t.Fatalf("with every answer lost: %v", err)
	}
	granted := fencingTokenIn(t, proxy.droppedAnswers()[0])

	// Asked again with the same key and options, the gateway answers the
	// grant the lost answers carried; with another key it is held.
	direct := lockgate.New(gateway.url())
	if _, err := direct.Lease(ctx, key, lockgate.TTL(10*time.Second)); !errors.Is(err, lockgate.ErrLockHeld) {
		t.Fatalf("a new acquisition: %v", err)
	}
	lease, err := direct.Lease(ctx, key, lockgate.TTL(10*time.Second), lockgate.IdempotencyKey(idempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Replayed() || lease.FencingToken() != granted {
		t.Fatalf("replayed %v, fencing token %d, the lost grant's %d", lease.Replayed(), lease.FencingToken(), granted)
	}
	// The same key with other options is refused.
	_, err = direct.Lease(ctx, key, lockgate.TTL(20*time.Second), lockgate.IdempotencyKey(idempotencyKey))
	var problem *lockgate.Problem
	if !errors.As(err, &problem) || problem.Slug() != "idempotency-key-reused" {
		t.Fatalf("the key with another body: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAReentryAddsAHoldThatItsReleaseGivesBackAlone(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	key := uniqueKey(t)
	first, err := gw.Lease(ctx, key, lockgate.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	// Another process, handed the token, re-enters the lock.
	elsewhere := sharedGateway(t)
	again, err := elsewhere.Lease(ctx, key, lockgate.Reentry(first.Token()), lockgate.TTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if first.Holds() != 1 || again.Holds() != 2 || again.Token() != first.Token() || again.FencingToken() != first.FencingToken() {
		t.Fatalf("holds %d then %d; same token %v, fencing tokens %d and %d", first.Holds(), again.Holds(),
			again.Token() == first.Token(), first.FencingToken(), again.FencingToken())
	}
	status, err := gw.Inspect(ctx, key)
	if err != nil || status == nil || status.Holds != 2 || status.TTL <= 10*time.Second {
		t.Fatalf("after the re-entry: %+v %v", status, err)
	}
	// Its Release gives back its own hold: the lock stays held by the first.
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if status, _ := gw.Inspect(ctx, key); status == nil || status.Holds != 1 || first.Err() != nil {
		t.Fatalf("after the re-entry's Release: %+v, %v", status, first.Err())
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holders(t, gw, key) != 0 {
		t.Fatal("held after both Releases")
	}
}

func TestAReentryWithATokenThatHoldsNothingIsRefused(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	key := uniqueKey(t)
	mustLock(t, gw, key)
	stranger := "3f9a1c2e-7b4d-4e6f-8a1b-2c3d4e5f6a7b"
	if _, err := gw.Lease(ctx, key, lockgate.Reentry(stranger)); !errors.Is(err, lockgate.ErrNotOwner) {
		t.Fatalf("re-entering another owner's lock: %v", err)
	}
	if _, err := gw.Lease(ctx, uniqueKey(t), lockgate.Reentry(stranger)); !errors.Is(err, lockgate.ErrNotOwner) {
		t.Fatalf("re-entering a free lock: %v", err)
	}
	for what, options := range map[string][]lockgate.LockOption{
		"with an idempotency key": {lockgate.Reentry(stranger), lockgate.IdempotencyKey("k-1")},
		"with a wait":             {lockgate.Reentry(stranger), lockgate.Wait(time.Second)},
	} {
		if _, err := gw.Lease(ctx, key, options...); !errors.Is(err, lockgate.ErrInvalidRequest) {
			t.Errorf("a re-entry %s: %v", what, err)
		}
	}
	if _, err := gw.Lock(ctx, key, lockgate.Reentry(stranger)); !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Fatalf("a streamed re-entry: %v", err)
	}
}
