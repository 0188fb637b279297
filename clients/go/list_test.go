// Listing the held locks a page at a time against a real gateway: every
// lock under a prefix once, as Inspect shows it, while others come and go;
// a pass carried on from a cursor; refusals of what the gateway cannot use.

package lockgate_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"lockgate"
)

// listAll walks every page of prefix, calling between(page number) after
// each page but the last, and returns the keys listed, in the order told,
// with their status.
func listAll(t *testing.T, gw *lockgate.Gateway, prefix string, between func(int), options ...lockgate.ListOption) ([]string, map[string]*lockgate.LockStatus) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	statuses := make(map[string]*lockgate.LockStatus)
	page, err := gw.List(ctx, prefix, options...)
	for n := 1; ; n++ {
		if err != nil {
			t.Fatalf("page %d: %v", n, err)
		}
		for _, status := range page.Locks {
			keys = append(keys, status.Key)
			statuses[status.Key] = status
		}
		if !page.More() {
			return keys, statuses
		}
		if n == 500 {
			t.Fatalf("no last page after %d pages (%d locks told)", n, len(keys))
		}
		if between != nil {
			between(n)
		}
		page, err = page.Next(ctx)
	}
}

func TestListTellsEveryHeldLockUnderAPrefixAsInspectShowsIt(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	exclusive := mustLock(t, gw, prefix+"x", lockgate.Value("host-a"))
	mustLock(t, gw, prefix+"rw", lockgate.Shared())
	mustLock(t, gw, prefix+"rw", lockgate.Shared())
	mustLock(t, gw, prefix+"pool", lockgate.Limit(3), lockgate.Permits(2))
	set, err := gw.LockAll(ctx, lockgate.Keys(prefix+"set:1", prefix+"set:2"))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release(ctx)
	released := mustLock(t, gw, prefix+"released")
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	outside := mustLock(t, gw, uniqueKey(t)) // another prefix

	keys, statuses := listAll(t, gw, prefix, nil, lockgate.PageSize(3))
	want := []string{prefix + "pool", prefix + "rw", prefix + "set:1", prefix + "set:2", prefix + "x"}
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	if fmt.Sprint(sorted) != fmt.Sprint(want) {
		t.Fatalf("listed %q, want %q", keys, want)
	}
	if _, ok := statuses[outside.Key()]; ok {
		t.Fatal("a lock under another prefix was listed")
	}
	x := statuses[prefix+"x"]
	if !x.Held || x.FencingToken != exclusive.FencingToken() || x.Holders != 1 || len(x.Leases) != 1 || x.Leases[0].Value != "host-a" {
		t.Fatalf("the exclusive lock: %+v", x)
	}
	if rw := statuses[prefix+"rw"]; rw.Mode != "shared" || rw.Holders != 2 {
		t.Fatalf("the shared lock: %+v", rw)
	}
	if pool := statuses[prefix+"pool"]; pool.Limit != 3 || pool.Leases[0].Permits != 2 {
		t.Fatalf("the counting lock: %+v", pool)
	}
	if s := statuses[prefix+"set:2"]; s.FencingToken != set.FencingToken(prefix+"set:2") {
		t.Fatalf("a lock of the set: %+v", s)
	}
}

func TestAFullPassListsTheLocksHeldAllAlongOnceWhileOthersComeAndGo(t *testing.T) {
	gw := sharedGateway(t)
	prefix := uniqueKey(t) + ":"
	steady := make(map[string]bool)
	for i := 0; i < 12; i++ {
		key := fmt.Sprintf("%ssteady:%02d", prefix, i)
		mustLock(t, gw, key, lockgate.TTL(30*time.Second))
		steady[key] = true
	}
	var churn []*lockgate.Lock
	between := func(n int) {
		// Between pages, new locks are taken and earlier ones freed.
		for i := 0; i < 2; i++ {
			churn = append(churn, mustLock(t, gw, fmt.Sprintf("%schurn:%02d:%d", prefix, n, i)))
		}
		if len(churn) > 2 {
			_ = churn[0].Release(context.Background())
			churn = churn[1:]
		}
	}
	keys, _ := listAll(t, gw, prefix, between, lockgate.PageSize(2))
	seen := make(map[string]int)
	for _, key := range keys {
		seen[key]++
	}
	for key := range steady {
		if seen[key] != 1 {
			t.Fatalf("%s listed %d times in %q", key, seen[key], keys)
		}
	}
	for key, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", key, n)
		}
	}
}

func TestAPassCarriesOnFromACursorHandedOver(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	for i := 0; i < 6; i++ {
		mustLock(t, gw, fmt.Sprintf("%s%d", prefix, i))
	}
	first, err := gw.List(ctx, prefix, lockgate.PageSize(2))
	if err != nil || !first.More() {
		t.Fatalf("a first page of 2 of 6 locks: %+v %v", first, err)
	}
	var told []string
	for _, status := range first.Locks {
		told = append(told, status.Key)
	}
	// Another process carries on with the cursor: together they list each lock once.
	rest, _ := listAll(t, sharedGateway(t), prefix, nil, lockgate.Cursor(first.NextCursor), lockgate.PageSize(2))
	all := append(told, rest...)
	sort.Strings(all)
	want := []string{prefix + "0", prefix + "1", prefix + "2", prefix + "3", prefix + "4", prefix + "5"}
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("listed %q, want %q", all, want)
	}
}

func TestListRefusesWhatTheGatewayCannotUse(t *testing.T) {
	gw := sharedGateway(t)
	ctx := context.Background()
	for what, options := range map[string][]lockgate.ListOption{
		"a page of -1":      {lockgate.PageSize(-1)},
		"a page of 1001":    {lockgate.PageSize(1001)},
		"a made-up cursor":  {lockgate.Cursor("not-a-cursor")},
		"a cursor too long": {lockgate.Cursor("1.123456789012345678901")},
	} {
		var problem *lockgate.Problem
		if _, err := gw.List(ctx, "", options...); !errors.Is(err, lockgate.ErrInvalidRequest) || !errors.As(err, &problem) || problem.Slug() != "invalid-field" {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := gw.List(ctx, "no spaces in keys"); !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Errorf("an invalid prefix: %v", err)
	}
	last, err := gw.List(ctx, uniqueKey(t), lockgate.PageSize(1000))
	for err == nil && last.More() {
		last, err = last.Next(ctx)
	}
	if err != nil || len(last.Locks) != 0 {
		t.Fatalf("a prefix nobody holds: %+v %v", last, err)
	}
	if _, err := last.Next(ctx); !errors.Is(err, lockgate.ErrInvalidRequest) {
		t.Fatalf("Next after the last page: %v", err)
	}
}
