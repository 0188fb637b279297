// Lock: a held lock, streamed (the gateway renews it while the response
// stays open) or a lease (the holder extends it), whose Context is
// cancelled once it is lost.

package lockgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// errExtendStreamed is Extend's answer for a streamed lock.
var errExtendStreamed = fmt.Errorf("%w: a streamed lock is renewed by the gateway; Extend is for a Lease", ErrInvalidRequest)

// grant is a `201` answer to `POST /locks`, and a streamed lock's
// `acquired` event.
type grant struct {
	Key          string `json:"key"`
	Token        string `json:"token"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
	ExpiresAtMs  int64  `json:"expires_at_ms"`
	Holds        int    `json:"holds"`
	WaitedMs     int64  `json:"waited_ms"`
}

// leaseState is the answer to `PUT /locks/{key}/ttl` and `/value`.
type leaseState struct {
	TTLMs        int64  `json:"ttl_ms"`
	ExpiresAtMs  int64  `json:"expires_at_ms"`
	FencingToken uint64 `json:"fencing_token"`
}

// Lock is a held lock. Its Context is cancelled once the lock is lost, or
// released; Err then says which, and why. A Lock is safe for use by many
// goroutines. Release it when done (a Lock dropped without Release stays
// held as long as its process keeps its connection, or its lease runs).
type Lock struct {
	gw       *Gateway
	key      string
	token    string
	waited   time.Duration
	permits  int
	streamed bool
	replayed bool
	// holds is the token's holds once this grant was made; reentered: the
	// grant added one hold to a lock held with its token (Reentry).
	holds     int
	reentered bool
	// lifetime: Context, Done, Err, TTL, ExpiresAt and Remaining.
	*lifetime

	mu sync.Mutex
	// fencing and mode change with an upgrade or a downgrade.
	fencing uint64
	mode    string
	value   *string
}

// newLock makes the Lock for a grant. sent is when the request that was
// granted was sent, received when its grant arrived; the lease's local
// deadline is timed from the earliest moment the grant could have been
// made (the sending, plus the wait the gateway reports), so it never falls
// after the real end. closeStream is a streamed lock's (nil for a lease).
func newLock(parent context.Context, g *Gateway, gr grant, cfg lockConfig, sent, received time.Time, closeStream context.CancelFunc) *Lock {
	waited := time.Duration(gr.WaitedMs) * time.Millisecond
	l := &Lock{
		gw:        g,
		key:       gr.Key,
		token:     gr.Token,
		fencing:   gr.FencingToken,
		mode:      cfg.mode(),
		waited:    waited,
		permits:   cfg.permits,
		value:     cfg.value,
		streamed:  closeStream != nil,
		holds:     gr.Holds,
		reentered: cfg.reentry != "",
	}
	lease := newLeaseClock(time.Duration(gr.TTLMs)*time.Millisecond, gr.ExpiresAtMs, sent, received, waited)
	l.lifetime = newLifetime(parent, lease, closeStream, func(reason, _ string, cause error) error {
		return &LostError{Key: l.key, Reason: reason, Err: cause}
	})
	// The gateway does not renew a lock in a session (the session's
	// keepalive keeps it): its end is the session's, or its stream's news.
	l.lifetime.keep(cfg)
	return l
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// Token is the owner's secret, needed to release, extend or re-enter the
// lock through the HTTP API. Never log it.
func (l *Lock) Token() string { return l.token }

// FencingToken is this hold's fencing token: larger than that of every
// earlier grant of the key. Pass it to the resource the lock protects, so
// that it can refuse the writes of a holder whose lease ran out. Upgrade
// gives the hold a new, larger one.
func (l *Lock) FencingToken() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fencing
}

// Mode is "exclusive" or "shared" (Upgrade and Downgrade change it).
func (l *Lock) Mode() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode
}

// Permits is how many places of a counting lock the holder asked for
// (Permits; 0 when it did not ask, which the gateway counts as 1).
func (l *Lock) Permits() int { return l.permits }

// Upgrade makes this shared hold the exclusive one without letting go
// (`PUT /locks/{key}/mode`), waiting for the other shared holders to leave
// for at most the Wait option (default: not at all), ahead of every request
// that arrived after it. The hold gets a new, larger FencingToken. When the
// wait runs out it returns an error matching ErrLockHeld and the shared
// hold is kept; when another holder is upgrading already, a
// *DeadlockError (ErrDeadlock).
func (l *Lock) Upgrade(ctx context.Context, options ...LockOption) error {
	cfg := newLockConfig(options)
	if err := cfg.refuse("an upgrade takes only Wait", "TTL", "Shared", "Limit", "Permits", "IdempotencyKey",
		"Reentry", "OnQueued", "InSession", "SessionTTL", "LockDelay"); err != nil {
		return err
	}
	return l.changeMode(ctx, "exclusive", cfg.wait)
}

// Downgrade makes this exclusive hold a shared one without letting go (the
// fencing token stays), letting in the shared requests waiting behind it.
func (l *Lock) Downgrade(ctx context.Context) error {
	return l.changeMode(ctx, "shared", 0)
}

func (l *Lock) changeMode(ctx context.Context, mode string, wait time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	a, err := l.gw.do(ctx, call{method: http.MethodPut, path: lockPath(l.key, "/mode"), extra: wait,
		body: map[string]any{"token": l.token, "mode": mode, "wait_ms": millis(wait)}})
	if err != nil {
		return l.failed(err)
	}
	var changed struct {
		Mode         string `json:"mode"`
		FencingToken uint64 `json:"fencing_token"`
	}
	if err := decode(a, &changed); err != nil {
		return err
	}
	l.mu.Lock()
	l.mode, l.fencing = changed.Mode, changed.FencingToken
	l.mu.Unlock()
	return nil
}

// Holds is how many holds the token had once this grant was made: 1 for
// a new grant, more for a re-entry (Reentry), which counts the holds
// before it.
func (l *Lock) Holds() int { return l.holds }

// Waited is how long the request waited in the lock's queue.
func (l *Lock) Waited() time.Duration { return l.waited }

// Streamed reports whether the gateway renews the lock (Lock, TryLock,
// Campaign) rather than its holder (Lease).
func (l *Lock) Streamed() bool { return l.streamed }

// Replayed reports whether a Lease's grant was answered to an earlier
// attempt of the same acquisition, whose answer was lost
// (`Idempotent-Replayed: true`).
func (l *Lock) Replayed() bool { return l.replayed }

// Value is the holder's public value, as last set ("" when none).
func (l *Lock) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return text(l.value)
}

// Release gives the lock back: `DELETE /locks/{key}` with the token, so
// the next owner may take it as soon as Release returns, then, for a
// streamed lock, the connection is closed. Context is then cancelled and
// Err returns ErrReleased. It is safe to defer, and to call more than once
// (later calls return what the first did). A re-entry (Reentry) gives back
// its one hold, and the lock stays held by the token's others; any other
// Lock gives back every hold of its token.
//
// It returns nil when it gave the lock back; the *LostError when the lock
// had been lost (the work done under it was not protected all along); or
// an error matching ErrUnavailable when the gateway could not confirm the
// release. A streamed lock is released all the same then, as the gateway
// releases a lock whose connection closes, and a lease ends with its TTL.
func (l *Lock) Release(ctx context.Context) error {
	return l.lifetime.end(ctx, func() error { return l.release(ctx) })
}

func (l *Lock) release(ctx context.Context) error {
	var err error
	if l.reentered {
		// One hold, sent once: a DELETE whose answer was lost may have
		// given it back, and a second would give back another's.
		_, err = l.gw.do(ctx, call{method: http.MethodDelete, path: lockPath(l.key, ""),
			header: http.Header{"Lock-Token": {l.token}}})
	} else {
		err = l.gw.releaseAll(ctx, l.key, l.token)
	}
	end := ErrReleased
	if reason, gone := lossOf(err); gone {
		end = l.lifetime.lostError(reason, "", err)
	} else if err != nil {
		err = unconfirmed(l.key, err)
	}
	l.lifetime.finishEnd(ctx, end)
	if end != ErrReleased {
		return end
	}
	return err
}

// unconfirmed is the error of a release that got no answer.
func unconfirmed(what string, err error) error {
	return fmt.Errorf("lockgate: the release of %s was not confirmed (the lock ends when its stream closes or its lease runs out): %w", what, err)
}

// Extend makes a lease end ttl from now (`PUT /locks/{key}/ttl`); extend it
// again before then, or lose it. A streamed lock needs no Extend (the
// gateway renews it at the TTL it was taken with) and refuses one with an
// error matching ErrInvalidRequest. Returns the *LostError when the lease
// already ended.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l.streamed {
		return errExtendStreamed
	}
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Now()
	a, err := l.gw.do(ctx, call{method: http.MethodPut, path: lockPath(l.key, "/ttl"),
		body: map[string]any{"token": l.token, "ttl_ms": millis(ttl)}})
	if err != nil {
		return l.failed(err)
	}
	var state leaseState
	if err := decode(a, &state); err != nil {
		return err
	}
	return l.lifetime.extended(time.Duration(state.TTLMs)*time.Millisecond, state.ExpiresAtMs, sent)
}

// SetValue replaces the holder's public value (`PUT /locks/{key}/value`,
// etcd's "proclaim"). Returns the *LostError when the lock is gone.
func (l *Lock) SetValue(ctx context.Context, value string) error {
	if err := l.Err(); err != nil {
		return err
	}
	_, err := l.gw.do(ctx, call{method: http.MethodPut, path: lockPath(l.key, "/value"),
		body: map[string]any{"token": l.token, "value": value}})
	if err != nil {
		return l.failed(err)
	}
	l.mu.Lock()
	l.value = &value
	l.mu.Unlock()
	return nil
}

// failed turns the gateway's news that the lock is gone into its loss.
func (l *Lock) failed(err error) error {
	reason, gone := lossOf(err)
	if !gone {
		return err
	}
	l.lifetime.lose(reason, "", err)
	if lostErr := l.Err(); lostErr != nil {
		return lostErr
	}
	return err
}

func (l *Lock) String() string {
	return fmt.Sprintf("lockgate.Lock(%s, fencing token %d)", l.key, l.FencingToken())
}

// releaseAll gives back every hold of token, until the lock is free (or
// not ours: nothing is left to give back). After a DELETE that got no
// answer it tries once more, and then counts `lock-not-found` as released:
// the first DELETE may have done it.
func (g *Gateway) releaseAll(ctx context.Context, key, token string) error {
	header := http.Header{"Lock-Token": {token}}
	retried := false
	for {
		a, err := g.do(ctx, call{method: http.MethodDelete, path: lockPath(key, ""), header: header})
		switch {
		case err == nil && a.status == http.StatusNoContent:
			return nil
		case err == nil:
			var rest struct {
				Holds int `json:"holds"`
			}
			if decode(a, &rest) != nil || rest.Holds == 0 {
				return nil
			}
		case retried && (errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotOwner)):
			return nil
		case !retried && errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
			var problem *Problem
			if errors.As(err, &problem) {
				return err // the gateway answered: it did nothing
			}
			retried = true
		default:
			return err
		}
	}
}
