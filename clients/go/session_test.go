// Sessions against a real gateway: locks of every kind hanging on one
// session, freed together by Close; a session deleted elsewhere, or one
// whose gateway falls silent, ending its locks' contexts; a deadlock
// between two sessions; sessions that do not exist; options a session
// has no use for.

package lockgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"lockgate"
)

// openSession opens a session, failing the test if it cannot; it is
// closed when the test ends.
func openSession(t *testing.T, gw *lockgate.Gateway, options ...lockgate.LockOption) *lockgate.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := gw.Session(ctx, options...)
	if err != nil {
		t.Fatalf("opening a session: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	return sess
}

// mustSessionLock takes key in sess, failing the test if it cannot.
func mustSessionLock(t *testing.T, sess *lockgate.Session, key string, options ...lockgate.LockOption) *lockgate.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := sess.Lock(ctx, key, options...)
	if err != nil {
		t.Fatalf("taking %s in the session: %v", key, err)
	}
	return lock
}

// sessionRequest sends a request about the session with this id over
// plain HTTP, as another process holding the id would, and returns the
// status and the decoded body (nil when there is none).
func sessionRequest(t *testing.T, gw *lockgate.Gateway, method, id string) (int, map[string]any) {
	t.Helper()
	request, err := http.NewRequest(method, gw.URL()+"/sessions/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(response.Body).Decode(&body)
	return response.StatusCode, body
}

// sessionEndedLock checks that lock was lost because its session ended.
func sessionEndedLock(t *testing.T, lock *lockgate.Lock) *lockgate.LostError {
	t.Helper()
	var lost *lockgate.LostError
	if err := lock.Err(); !errors.As(err, &lost) || !errors.Is(err, lockgate.ErrLockLost) || lost.Reason != lockgate.ReasonSessionEnded {
		t.Fatalf("%s: Err %v", lock.Key(), err)
	}
	if lock.Context().Err() == nil || lock.Remaining() != 0 {
		t.Fatalf("%s: context %v, %v left", lock.Key(), lock.Context().Err(), lock.Remaining())
	}
	return lost
}

func TestASessionsLocksOutliveItsTTLAndAreFreedTogetherByClose(t *testing.T) {
	gw := sharedGateway(t)
	base := uniqueKey(t)
	ctx := context.Background()
	sess := openSession(t, gw, lockgate.SessionTTL(time.Second), lockgate.LockDelay(3*time.Second), lockgate.Value("worker-7"))
	if sess.TTL() != time.Second || sess.LockDelay() != 3*time.Second || sess.Err() != nil || sess.Remaining() <= 0 {
		t.Fatalf("session: ttl %v, lock-delay %v, err %v, remaining %v", sess.TTL(), sess.LockDelay(), sess.Err(), sess.Remaining())
	}
	// The id is a secret: no way of printing the session shows it.
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if text := fmt.Sprintf(format, sess); strings.Contains(text, sess.ID()) || sess.ID() == "" {
			t.Fatalf("%s of the session shows its id: %s", format, text)
		}
	}

	exclusive := mustSessionLock(t, sess, base+":x")
	readers := []*lockgate.Lock{
		mustSessionLock(t, sess, base+":rw", lockgate.Shared()),
		mustSessionLock(t, sess, base+":rw", lockgate.Shared()),
	}
	counted := mustSessionLock(t, sess, base+":pool", lockgate.Limit(3), lockgate.Value("slot-a"))
	locks := append([]*lockgate.Lock{exclusive, counted}, readers...)
	for _, lock := range locks {
		if !lock.Streamed() || lock.TTL() != sess.TTL() || lock.Err() != nil {
			t.Fatalf("%s: streamed %v, ttl %v (session's %v), err %v", lock.Key(), lock.Streamed(), lock.TTL(), sess.TTL(), lock.Err())
		}
	}
	if readers[0].Mode() != "shared" || readers[0].FencingToken() == readers[1].FencingToken() {
		t.Fatalf("readers: %s, fencing tokens %d and %d", readers[0].Mode(), readers[0].FencingToken(), readers[1].FencingToken())
	}
	status, body := sessionRequest(t, gw, http.MethodGet, sess.ID())
	if attached, _ := body["locks"].([]any); status != http.StatusOK || len(attached) != len(locks) || body["value"] != "worker-7" {
		t.Fatalf("GET /sessions/{id}: %d %v", status, body)
	}

	// The gateway renews none of them: the session's keepalive keeps them,
	// well past a lease.
	time.Sleep(2500 * time.Millisecond)
	for _, lock := range locks {
		if lock.Err() != nil || holders(t, gw, lock.Key()) == 0 {
			t.Fatalf("%s lost while its session was kept alive: %v", lock.Key(), lock.Err())
		}
	}
	if sess.Err() != nil || sess.ExpiresAt().Before(time.Now().Add(-2*time.Second)) {
		t.Fatalf("keepalives not heard: err %v, expires at %v", sess.Err(), sess.ExpiresAt())
	}

	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Every lock is free when Close returns (a clean end: no lock-delay).
	for _, key := range []string{base + ":x", base + ":rw", base + ":pool"} {
		if n := holders(t, gw, key); n != 0 {
			t.Fatalf("%s has %d holders after Close", key, n)
		}
	}
	for _, lock := range locks {
		if !errors.Is(lock.Err(), lockgate.ErrReleased) || lock.Context().Err() == nil {
			t.Fatalf("%s after Close: err %v, context %v", lock.Key(), lock.Err(), lock.Context().Err())
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release after the session's Close: %v", err)
		}
	}
	if !errors.Is(sess.Err(), lockgate.ErrSessionClosed) || sess.Context().Err() == nil || sess.Remaining() != 0 {
		t.Fatalf("the session after Close: err %v, context %v", sess.Err(), sess.Context().Err())
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := sess.Lock(ctx, base+":late"); !errors.Is(err, lockgate.ErrSessionNotFound) {
		t.Fatalf("a lock in a closed session: %v", err)
	}
	nextGrantIsLater(t, gw, exclusive)
}

func TestALockReleasedBeforeItsSessionEndsIsFreeAtOnce(t *testing.T) {
	gw := sharedGateway(t)
	sess := openSession(t, gw)
	first := mustSessionLock(t, sess, uniqueKey(t))
	other := mustSessionLock(t, sess, uniqueKey(t))
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if holders(t, gw, first.Key()) != 0 || !errors.Is(first.Err(), lockgate.ErrReleased) {
		t.Fatalf("after Release: %d holders, err %v", holders(t, gw, first.Key()), first.Err())
	}
	if other.Err() != nil || sess.Err() != nil {
		t.Fatalf("a release ended the rest: lock %v, session %v", other.Err(), sess.Err())
	}
}

func TestASessionDeletedElsewhereEndsItsLocks(t *testing.T) {
	gw := sharedGateway(t)
	sess := openSession(t, gw)
	locks := []*lockgate.Lock{
		mustSessionLock(t, sess, uniqueKey(t)),
		mustSessionLock(t, sess, uniqueKey(t), lockgate.Shared()),
	}
	work := make(chan error, 1)
	go func() {
		// Work that honours a lock's context stops when its session ends.
		<-locks[0].Context().Done()
		work <- locks[0].Context().Err()
	}()

	// Another process, handed the id, ends the session.
	if status, _ := sessionRequest(t, gw, http.MethodDelete, sess.ID()); status != http.StatusNoContent {
		t.Fatalf("DELETE /sessions/{id}: %d", status)
	}
	doneWithin(t, sess.Done(), 2*time.Second, "the session's context is cancelled")
	var lost *lockgate.SessionLostError
	if err := sess.Err(); !errors.As(err, &lost) || lost.Reason != lockgate.ReasonSessionDeleted || !errors.Is(err, lockgate.ErrSessionNotFound) {
		t.Fatalf("the session's Err: %v", err)
	}
	for _, lock := range locks {
		doneWithin(t, lock.Done(), 2*time.Second, "the lock's context is cancelled")
		sessionEndedLock(t, lock)
		if n := holders(t, gw, lock.Key()); n != 0 {
			t.Fatalf("%s has %d holders after its session ended", lock.Key(), n)
		}
	}
	if err := <-work; !errors.Is(err, context.Canceled) {
		t.Fatalf("the work saw %v", err)
	}
	if err := sess.Close(context.Background()); !errors.As(err, &lost) {
		t.Fatalf("Close of a lost session: %v", err)
	}
	if _, err := sess.TryLock(context.Background(), uniqueKey(t)); !errors.Is(err, lockgate.ErrSessionNotFound) {
		t.Fatalf("a lock in a lost session: %v", err)
	}
}

func TestASessionWhoseGatewayFallsSilentExpiresAndEndsItsLocks(t *testing.T) {
	redis, survivor := sharedStack(t)
	silent := ownGateway(t, redis)
	gw := lockgate.New(silent.url())
	other := lockgate.New(survivor.url())
	const ttl = time.Second
	sess := openSession(t, gw, lockgate.SessionTTL(ttl))
	locks := []*lockgate.Lock{
		mustSessionLock(t, sess, uniqueKey(t)),
		mustSessionLock(t, sess, uniqueKey(t), lockgate.Limit(2)),
	}

	time.Sleep(100 * time.Millisecond)
	silent.freeze() // nobody keeps the session alive, and its streams say nothing
	defer silent.thaw()
	frozen := time.Now()
	// The last keepalive came at most a third of the lease before the
	// freeze, and the client's deadline never falls after the lease's end.
	doneWithin(t, sess.Done(), 2*ttl, "the session's context is cancelled")
	took := time.Since(frozen)
	var lost *lockgate.SessionLostError
	if err := sess.Err(); !errors.As(err, &lost) || lost.Reason != lockgate.ReasonLeaseExpired {
		t.Fatalf("the session's Err: %v", err)
	}
	for _, lock := range locks {
		doneWithin(t, lock.Done(), time.Second, "the lock's context is cancelled")
		if cause := sessionEndedLock(t, lock); !errors.Is(cause, lockgate.ErrSessionNotFound) {
			t.Fatalf("%s: the loss does not unwrap to the session's end: %v", lock.Key(), cause)
		}
	}
	// The session lives in Redis, not in its gateway: another instance
	// frees its locks once its lease ends (within a second of that).
	for _, lock := range locks {
		key := lock.Key()
		eventually(t, 2*ttl+3*time.Second, key+" is freed by another gateway", func() bool {
			return holders(t, other, key) == 0
		})
	}
	t.Logf("session lost %v after its gateway froze", took)
}

func TestADeadlockBetweenTwoSessionsIsRefusedWithItsCycle(t *testing.T) {
	gw := sharedGateway(t)
	base := uniqueKey(t)
	x, y := base+":x", base+":y"
	first := openSession(t, gw)
	second := openSession(t, gw)
	mustSessionLock(t, first, x)
	mustSessionLock(t, second, y)

	type outcome struct {
		lock *lockgate.Lock
		err  error
	}
	firstWait := make(chan outcome, 1)
	go func() {
		lock, err := first.Lock(context.Background(), y, lockgate.Wait(30*time.Second))
		firstWait <- outcome{lock, err}
	}()
	eventually(t, 5*time.Second, "the first session waits for y", func() bool {
		status, err := gw.Inspect(context.Background(), y)
		return err == nil && status != nil && len(status.Waiters) == 1
	})

	// The second session's wait closes the cycle: it is the youngest
	// waiter, and is refused.
	started := time.Now()
	_, err := second.Lock(context.Background(), x, lockgate.Wait(30*time.Second))
	took := time.Since(started)
	var deadlock *lockgate.DeadlockError
	var problem *lockgate.Problem
	if !errors.Is(err, lockgate.ErrDeadlock) || !errors.As(err, &deadlock) || !errors.As(err, &problem) {
		t.Fatalf("closing the cycle: %v", err)
	}
	if !reflect.DeepEqual(deadlock.Cycle, []string{x, y}) || problem.Slug() != "deadlock" || problem.Status != http.StatusConflict {
		t.Fatalf("cycle %q, problem %+v", deadlock.Cycle, problem)
	}
	if errors.Is(err, lockgate.ErrLockHeld) || took > 10*time.Second {
		t.Fatalf("refused after %v as %v", took, err)
	}
	t.Logf("deadlock refused after %v", took)

	// The other waiter goes on waiting, and is granted once the second
	// session lets go of y.
	select {
	case got := <-firstWait:
		t.Fatalf("the other waiter was answered too: %v", got.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := second.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-firstWait:
		if got.err != nil {
			t.Fatalf("the other waiter: %v", got.err)
		}
		if got.lock.Key() != y || got.lock.Err() != nil {
			t.Fatalf("granted %s, err %v", got.lock.Key(), got.lock.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other waiter was not granted after the second session closed")
	}
}

func TestAWaitInASessionEndsWhenTheSessionDoes(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	mustLock(t, gw, key)
	sess := openSession(t, gw)
	waited := make(chan error, 1)
	go func() {
		_, err := sess.Lock(context.Background(), key)
		waited <- err
	}()
	eventually(t, 5*time.Second, "the session's request waits", func() bool {
		status, err := gw.Inspect(context.Background(), key)
		return err == nil && status != nil && len(status.Waiters) == 1
	})
	if status, _ := sessionRequest(t, gw, http.MethodDelete, sess.ID()); status != http.StatusNoContent {
		t.Fatalf("DELETE /sessions/{id}: %d", status)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, lockgate.ErrSessionNotFound) {
			t.Fatalf("the wait ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait went on after its session ended")
	}
	queueEmpties(t, gw, key)
}

func TestALockInASessionOpenedElsewhere(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	sess := openSession(t, gw)
	// Another process, handed the id, hangs its lock on the session.
	elsewhere := sharedGateway(t)
	lock, err := elsewhere.Lock(ctx, uniqueKey(t), lockgate.InSession(sess.ID()))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	_, body := sessionRequest(t, gw, http.MethodGet, sess.ID())
	if attached, _ := body["locks"].([]any); len(attached) != 1 {
		t.Fatalf("the session's locks: %v", body)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	doneWithin(t, lock.Done(), 2*time.Second, "the lock's context is cancelled")
	sessionEndedLock(t, lock)
	if n := holders(t, gw, lock.Key()); n != 0 {
		t.Fatalf("%d holders after the session closed", n)
	}
	// The id of an ended session is refused like one never opened.
	if _, err := elsewhere.TryLock(ctx, uniqueKey(t), lockgate.InSession(sess.ID())); !errors.Is(err, lockgate.ErrSessionNotFound) {
		t.Fatalf("a lock in a closed session: %v", err)
	}
}

func TestALockInASessionThatNeverWasIsRefused(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	bogus := "5d0c7f7e-3b9a-4c1e-8f2a-6e4b1d9c0a7f"
	key := uniqueKey(t)
	_, err := gw.Lock(ctx, key, lockgate.InSession(bogus), lockgate.Wait(time.Second))
	var problem *lockgate.Problem
	if !errors.Is(err, lockgate.ErrSessionNotFound) || !errors.As(err, &problem) || problem.Slug() != "session-not-found" || problem.Status != http.StatusNotFound {
		t.Fatalf("a lock in a session that never was: %v", err)
	}
	if holders(t, gw, key) != 0 {
		t.Fatal("a refused lock is held")
	}
	if status, _ := sessionRequest(t, gw, http.MethodDelete, bogus); status != http.StatusNotFound {
		t.Fatalf("DELETE of a session that never was: %d", status)
	}
}

func TestOptionsASessionOrItsLocksHaveNoUseForAreRefused(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, lockgate.ErrInvalidRequest) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := gw.Session(ctx, lockgate.TTL(time.Second))
	refused("a session with a lock's TTL", err)
	_, err = gw.Lock(ctx, uniqueKey(t), lockgate.SessionTTL(time.Second))
	refused("a lock with a session's TTL", err)
	_, err = gw.Lease(ctx, uniqueKey(t), lockgate.LockDelay(time.Second))
	refused("a lease with a session's lock-delay", err)
	sess := openSession(t, gw)
	_, err = sess.Lock(ctx, uniqueKey(t), lockgate.TTL(time.Second))
	refused("a lock in a session with a TTL of its own", err)
	_, err = gw.Lease(ctx, uniqueKey(t), lockgate.InSession(sess.ID()))
	refused("a lease in a session", err)
	// A TTL out of the gateway's range is the gateway's refusal.
	_, err = gw.Session(ctx, lockgate.SessionTTL(10*time.Millisecond))
	var problem *lockgate.Problem
	var field string
	if !errors.As(err, &problem) || !problem.Member("field", &field) || field != "ttl_ms" {
		t.Fatalf("a session TTL below the minimum: %v", err)
	}
}
