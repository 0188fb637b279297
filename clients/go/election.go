// Leader election on a lock, in the manner of etcd's concurrency.Election:
// the leader holds a streamed lock whose value is its address, the other
// candidates wait in the lock's queue, and the fencing token is the term.

package lockgate

import "context"

// Leader is who leads: its public value and its term (the fencing token of
// its lock, larger for every new term). The zero Leader means nobody leads.
type Leader struct {
	Value string
	Term  uint64
}

// Leadership is the office of an elected candidate: a streamed lock whose
// Context is cancelled when the office is lost (Err says why).
type Leadership struct {
	*Lock
}

// Term is the leader's term: its lock's fencing token. Pass it to what the
// leader writes to, so that a deposed leader's writes can be refused.
func (l *Leadership) Term() uint64 { return l.FencingToken() }

// Proclaim publishes a new value for the leader without a new election.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	return l.SetValue(ctx, value)
}

// Resign steps down: the next candidate in the queue is elected at once.
// The Context is cancelled with ErrReleased.
func (l *Leadership) Resign(ctx context.Context) error {
	return l.Release(ctx)
}

// Campaign runs for leader of key with value (such as this process's
// address) as its public value, and blocks until elected, however long
// that takes: a gateway that cannot serve is asked again with backoff. It
// returns ctx.Err() when ctx is done first, and an error matching
// ErrInvalidRequest when the gateway refuses the request itself. TTL bounds
// how long a leader whose gateway died stays in office; Wait is not used.
func (g *Gateway) Campaign(ctx context.Context, key, value string, options ...LockOption) (*Leadership, error) {
	cfg := newLockConfig(options)
	cfg.value = &value
	cfg.wait, cfg.waitSet = 0, false
	lock, err := g.lockWaiting(ctx, key, cfg, true)
	if err != nil {
		return nil, err
	}
	return &Leadership{lock}, nil
}

// Leader returns who leads key now; the zero Leader when nobody does.
func (g *Gateway) Leader(ctx context.Context, key string) (Leader, error) {
	status, err := g.Inspect(ctx, key)
	if err != nil || status == nil {
		return Leader{}, err
	}
	return leaderOf(status), nil
}

// Observe follows who leads key: first who leads now, then each new leader,
// the zero Leader whenever the office falls empty, and the leader again
// when it proclaims a new value. It watches the lock (see Watch, whose
// errors it returns); the channel is closed when ctx is done or the watch
// is refused.
func (g *Gateway) Observe(ctx context.Context, key string) (<-chan Leader, error) {
	events, err := g.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	leaders := make(chan Leader)
	go func() {
		defer close(leaders)
		var current Leader
		told := false
		for event := range events {
			next, ok := nextLeader(current, event)
			if !ok || (told && next == current) {
				continue
			}
			current, told = next, true
			select {
			case leaders <- current:
			case <-ctx.Done():
				return
			}
		}
	}()
	return leaders, nil
}

// nextLeader is the leader after event; false when the event says nothing
// about who leads.
func nextLeader(current Leader, event WatchEvent) (Leader, bool) {
	switch event.Type {
	case EventSnapshot:
		if event.Snapshot == nil {
			return current, false
		}
		return leaderOf(event.Snapshot), true
	case EventAcquired:
		return Leader{Value: event.Value, Term: event.FencingToken}, true
	case EventValue:
		if event.FencingToken == current.Term {
			return Leader{Value: event.Value, Term: current.Term}, true
		}
	case EventReleased, EventExpired, EventRevoked:
		if event.FencingToken == current.Term {
			return Leader{}, true
		}
	}
	return current, false
}

func leaderOf(status *LockStatus) Leader {
	if !status.Held || len(status.Leases) == 0 {
		return Leader{}
	}
	return Leader{Value: status.Leases[0].Value, Term: status.Leases[0].FencingToken}
}
