// Reading and revoking locks: Inspect (`GET /locks/{key}`) and Revoke
// (`DELETE /locks/{key}?force=true`), with the lock's state as Go types
// (which List's pages hold too).

package lockgate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// LockStatus is a lock as `GET /locks/{key}` (or a watch's snapshot) shows
// it. Times are by the Redis server's clock.
type LockStatus struct {
	Key  string
	Held bool
	// Mode is "exclusive" or "shared".
	Mode string
	// Limit is a counting lock's number of places (1 for a plain mutex, 0
	// for a shared lock).
	Limit int
	// Holders is how many hold it now.
	Holders int
	// FencingToken, Holds, TTL and ExpiresAt are those of the first lease.
	FencingToken uint64
	Holds        int
	TTL          time.Duration
	ExpiresAt    time.Time
	// Leases has one entry per holder, oldest grant first.
	Leases []LeaseInfo
	// Waiters are the requests waiting now, across every instance, in the
	// order they will be served.
	Waiters []Waiter
	// DelayedUntil is when a lock-delay ends (zero when there is none).
	DelayedUntil time.Time
}

// LeaseInfo is one holder's lease, as readers see it (never its token).
type LeaseInfo struct {
	FencingToken uint64
	// Value is the holder's public value ("" when none).
	Value      string
	Holds      int
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// Permits is the places of a counting lock it takes (0 for other kinds).
	Permits int
	// Session is the public handle of the session it hangs on ("" for
	// none; never the session's id).
	Session string
}

// Waiter is a request waiting for the lock, on any instance.
type Waiter struct {
	// Position 1 is served next.
	Position     int
	Mode         string
	WaitingSince time.Time
}

// lockStatusWire is LockStatus as the gateway sends it.
type lockStatusWire struct {
	Key            string `json:"key"`
	Held           bool   `json:"held"`
	Mode           string `json:"mode"`
	Limit          int    `json:"limit"`
	Holders        int    `json:"holders"`
	FencingToken   uint64 `json:"fencing_token"`
	Holds          int    `json:"holds"`
	TTLMs          int64  `json:"ttl_ms"`
	ExpiresAtMs    int64  `json:"expires_at_ms"`
	DelayedUntilMs int64  `json:"delayed_until_ms"`
	Leases         []struct {
		FencingToken uint64  `json:"fencing_token"`
		Value        *string `json:"value"`
		Holds        int     `json:"holds"`
		AcquiredAtMs int64   `json:"acquired_at_ms"`
		ExpiresAtMs  int64   `json:"expires_at_ms"`
		Permits      *int    `json:"permits"`
		Session      *string `json:"session"`
	} `json:"leases"`
	Waiters []struct {
		Position       int    `json:"position"`
		Mode           string `json:"mode"`
		WaitingSinceMs int64  `json:"waiting_since_ms"`
	} `json:"waiters"`
}

func parseLockStatus(data []byte) (*LockStatus, error) {
	var w lockStatusWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	return w.status(), nil
}

// status is the lock the gateway described.
func (w *lockStatusWire) status() *LockStatus {
	s := &LockStatus{
		Key: w.Key, Held: w.Held, Mode: w.Mode, Limit: w.Limit, Holders: w.Holders,
		FencingToken: w.FencingToken, Holds: w.Holds,
		TTL:          time.Duration(w.TTLMs) * time.Millisecond,
		ExpiresAt:    unixMilli(w.ExpiresAtMs),
		DelayedUntil: unixMilli(w.DelayedUntilMs),
	}
	for _, lease := range w.Leases {
		s.Leases = append(s.Leases, LeaseInfo{
			FencingToken: lease.FencingToken, Value: text(lease.Value), Holds: lease.Holds,
			AcquiredAt: unixMilli(lease.AcquiredAtMs), ExpiresAt: unixMilli(lease.ExpiresAtMs),
			Session: text(lease.Session),
		})
		if lease.Permits != nil {
			s.Leases[len(s.Leases)-1].Permits = *lease.Permits
		}
	}
	for _, waiter := range w.Waiters {
		s.Waiters = append(s.Waiters, Waiter{
			Position: waiter.Position, Mode: waiter.Mode, WaitingSince: unixMilli(waiter.WaitingSinceMs),
		})
	}
	return s
}

// unixMilli is the time of a `*_at_ms` field; zero for 0 (absent).
func unixMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func text(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Inspect returns the lock as the gateway sees it now, or nil when nobody
// holds it (and no lock-delay keeps it).
func (g *Gateway) Inspect(ctx context.Context, key string) (*LockStatus, error) {
	a, err := g.do(ctx, call{method: http.MethodGet, path: lockPath(key, "")})
	var problem *Problem
	if errors.As(err, &problem) && problem.Slug() == "lock-not-found" {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	status, err := parseLockStatus(a.body)
	if err != nil {
		return nil, &unavailableError{message: "reading the lock's state", err: err}
	}
	return status, nil
}

// Revoke ends every hold of key at once (fencingToken 0), or only the hold
// with that fencing token: an operator's tool for a holder that is stuck.
// Its holder's Context is cancelled (ReasonRevoked) and the next grant's
// fencing token is larger than any before. Needs the gateway's admin token
// (WithAPIKey) or a principal allowed to revoke; a hold that is not there
// is an error matching ErrLockLost (`lock-not-found`).
func (g *Gateway) Revoke(ctx context.Context, key string, fencingToken uint64) error {
	path := lockPath(key, "") + "?force=true"
	if fencingToken != 0 {
		path += "&fencing_token=" + strconv.FormatUint(fencingToken, 10)
	}
	_, err := g.do(ctx, call{method: http.MethodDelete, path: path})
	return err
}
