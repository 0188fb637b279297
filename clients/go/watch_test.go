// Watching a lock: the snapshot, then every change; after a dropped
// connection the watch resumes with Last-Event-ID and gets the events it
// missed, each once, in order; a new watch resumes from an id given.

package lockgate_test

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"lockgate"
)

// collector gathers a watch's events as they come.
type collector struct {
	mu     sync.Mutex
	events []lockgate.WatchEvent
	done   chan struct{}
}

func collect(events <-chan lockgate.WatchEvent) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for event := range events {
			c.mu.Lock()
			c.events = append(c.events, event)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) seen() []lockgate.WatchEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]lockgate.WatchEvent(nil), c.events...)
}

func (c *collector) await(t *testing.T, n int, what string) []lockgate.WatchEvent {
	t.Helper()
	eventually(t, 10*time.Second, what, func() bool { return len(c.seen()) >= n })
	return c.seen()
}

// watchThroughProxy watches a fresh key through a proxy to the shared
// gateway, until the snapshot came; gw goes to the gateway directly.
func watchThroughProxy(t *testing.T, options ...lockgate.WatchOption) (gw *lockgate.Gateway, p *proxy, key string, c *collector) {
	t.Helper()
	_, gateway := sharedStack(t)
	p = newProxy(t, gateway.addr)
	key = uniqueKey(t)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	events, err := lockgate.New(p.url()).Watch(ctx, key, options...)
	if err != nil {
		t.Fatal(err)
	}
	c = collect(events)
	c.await(t, 1, "the snapshot")
	return lockgate.New(gateway.url()), p, key, c
}

func types(events []lockgate.WatchEvent) []lockgate.EventType {
	var out []lockgate.EventType
	for _, event := range events {
		out = append(out, event.Type)
	}
	return out
}

func TestAWatchStartsWithASnapshotThenTellsEachChange(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	holder := mustLock(t, gw, key, lockgate.Value("first"))
	ctx, stop := context.WithCancel(context.Background())
	events, err := gw.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(events)
	snapshot := c.await(t, 1, "the snapshot")[0]
	if snapshot.Type != lockgate.EventSnapshot || snapshot.Snapshot == nil || !snapshot.Snapshot.Held ||
		snapshot.Snapshot.Leases[0].FencingToken != holder.FencingToken() || snapshot.Snapshot.Leases[0].Value != "first" {
		t.Fatalf("snapshot %+v", snapshot)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	released := c.await(t, 2, "released")[1]
	if released.Type != lockgate.EventReleased || released.Key != key || released.FencingToken != holder.FencingToken() || released.ID == "" {
		t.Fatalf("released %+v", released)
	}
	stop()
	doneWithin(t, c.done, 5*time.Second, "the channel closes when the context is done")

	if _, err := gw.Watch(context.Background(), "not a key"); err == nil {
		t.Fatal("a watch of an invalid key was not refused")
	}
}

func TestAWatchResumesAfterADroppedConnectionMissingNothingRepeatingNothing(t *testing.T) {
	gw, proxy, key, c := watchThroughProxy(t)
	first := mustLock(t, gw, key, lockgate.Value("a"))
	lastSeen := c.await(t, 2, "acquired")[1].ID

	// The connection drops, and stays down while the lock changes hands.
	proxy.refuse(true)
	proxy.cut()
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := mustLock(t, gw, key, lockgate.Value("b"))
	if err := second.SetValue(context.Background(), "c"); err != nil {
		t.Fatal(err)
	}
	if err := second.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.refuse(false)

	seen := c.await(t, 6, "the missed events")
	time.Sleep(200 * time.Millisecond) // nothing more may come
	seen = c.seen()
	want := []lockgate.EventType{"snapshot", "acquired", "released", "acquired", "value", "released"}
	if got := types(seen); len(got) != len(want) || !equalTypes(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	tokens := []uint64{0, first.FencingToken(), first.FencingToken(), second.FencingToken(), second.FencingToken(), second.FencingToken()}
	ids := map[string]bool{}
	for i, event := range seen {
		if event.FencingToken != tokens[i] || ids[event.ID] {
			t.Fatalf("event %d: %+v (fencing token want %d; ids so far %v)", i, event, tokens[i], ids)
		}
		ids[event.ID] = true
	}
	if seen[4].Value != "c" {
		t.Fatalf("value event %+v", seen[4])
	}
	resumed := regexp.MustCompile(`(?im)^last-event-id: *(\S+)\r$`)
	var sentIDs []string
	for _, request := range proxy.sentRequests() {
		if match := resumed.FindStringSubmatch(request); match != nil {
			sentIDs = append(sentIDs, match[1])
		}
	}
	if len(sentIDs) == 0 || sentIDs[0] != lastSeen {
		t.Fatalf("reconnections sent Last-Event-ID %q; the last event seen was %q", sentIDs, lastSeen)
	}
}

func TestAWatchResumesFromAGivenEventID(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	ctx, stop := context.WithCancel(context.Background())
	events, err := gw.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(events)
	c.await(t, 1, "the snapshot")
	for _, value := range []string{"one", "two"} {
		lock := mustLock(t, gw, key, lockgate.Value(value))
		if err := lock.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	first := c.await(t, 5, "two grants and releases")
	stop()

	// A watch started later, from the first grant's id, gets what followed.
	ctx, stop = context.WithCancel(context.Background())
	defer stop()
	events, err = gw.Watch(ctx, key, lockgate.LastEventID(first[1].ID))
	if err != nil {
		t.Fatal(err)
	}
	later := collect(events).await(t, 3, "the events after the given id")
	for i, event := range later[:3] {
		if event.ID != first[i+2].ID || event.Type != first[i+2].Type {
			t.Fatalf("resumed event %d: %+v, want %+v", i, event, first[i+2])
		}
	}
}

func TestAWatchReconnectsWhenItsConnectionFallsSilent(t *testing.T) {
	gw, proxy, key, c := watchThroughProxy(t, lockgate.IdleTimeout(400*time.Millisecond))
	// The open connection stays open and says nothing more, not even a
	// keep-alive: only a new connection can bring the next event.
	proxy.mute()
	lock := mustLock(t, gw, key)
	seen := c.await(t, 2, "the acquired event, through a new connection")
	if seen[1].Type != lockgate.EventAcquired || seen[1].FencingToken != lock.FencingToken() {
		t.Fatalf("after the silence: %+v", seen[1])
	}
	if n := proxy.connections(); n < 2 {
		t.Fatalf("%d connections", n)
	}
}

func equalTypes(a, b []lockgate.EventType) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
