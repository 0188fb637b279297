// Package lockgate is the Go client of lockgate, distributed locks on Redis
// over HTTP. A lock is held through a streamed lock (`POST /locks` with
// `Accept: text/event-stream`): the gateway renews its lease for as long as
// the response stays open, and releases it at once when the connection
// closes. A lost lock is a cancelled context, as etcd's
// concurrency.Session has it:
//
//	gw := lockgate.New("http://127.0.0.1:8080")
//	lock, err := gw.Lock(ctx, "inv:42", lockgate.TTL(30*time.Second), lockgate.Wait(10*time.Second))
//	if errors.Is(err, lockgate.ErrLockHeld) {
//		return err // someone else held it for 10 s
//	}
//	if err != nil {
//		return err
//	}
//	defer lock.Release(context.Background())
//	// lock.Context() is cancelled once the lock is lost; lock.Err() says why.
//	return write(lock.Context(), row, lock.FencingToken())
//
// The lock is lost when the gateway reports it gone (its key deleted,
// another owner holding it, Redis unreachable past the lease, revoked, the
// gateway shutting down), when someone releases it with its token, when
// the stream breaks, or when no renewal came before the lease could have
// ended by this process's clock (a gateway that froze). Then its Context is
// cancelled and Err returns a *LostError matching ErrLockLost, whose Reason
// says which. On Go 1.20 and later context.Cause(lock.Context()) returns
// the same error.
//
// Besides streamed locks: LockAll takes several locks at once, all or
// none, held as one through a streamed batch (a LockSet, lost as a lock
// is); Session opens one lease for many locks (its locks and sets end when
// it does, as with etcd's concurrency.Session); Lease takes a plain lease
// that its holder extends (retried with one Idempotency-Key when an answer
// is lost); Inspect, List and Revoke read and end locks; Watch follows a
// lock's events, resuming with Last-Event-ID; Campaign, Leader and Observe
// elect a leader.
//
// A Lock, a LockSet and a Session end the same way: Context, Done, Err,
// TTL, ExpiresAt and Remaining are one implementation, embedded in each.
//
// Refusals are *Problem values (the gateway's RFC 9457 problem documents)
// that match the sentinel errors by their slug: ErrLockHeld, ErrNotOwner,
// ErrLockLost, ErrDeadlock, ErrSessionNotFound, ErrUnavailable,
// ErrInvalidRequest. A gateway that cannot be reached matches
// ErrUnavailable.
//
// Durations are time.Duration (sent as whole milliseconds); times the
// gateway reports are by the Redis server's clock. Fencing tokens are
// uint64, read from the JSON without going through a float.
package lockgate
