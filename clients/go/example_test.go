// Examples of the client's use (compiled by go test; they need a gateway
// to run, so they have no output to check).

package lockgate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"lockgate"
)

// store stands for the resource a lock protects, which refuses writes with
// a fencing token older than the newest it has seen.
type store struct{}

func (store) Write(ctx context.Context, row string, fencingToken uint64) error { return ctx.Err() }

func ExampleGateway_Lock() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx := context.Background()

	lock, err := gw.Lock(ctx, "inv:42", lockgate.TTL(30*time.Second), lockgate.Wait(10*time.Second))
	if errors.Is(err, lockgate.ErrLockHeld) {
		log.Print("someone else held inv:42 for 10 s")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.Background())

	var db store
	for _, row := range []string{"a", "b", "c"} {
		// lock.Context() is cancelled once the lock is lost: the write stops.
		if err := db.Write(lock.Context(), row, lock.FencingToken()); err != nil {
			log.Printf("stopped: %v", lock.Err()) // a *lockgate.LostError, with its Reason
			return
		}
	}
}

func ExampleGateway_TryLock() {
	gw := lockgate.New("http://127.0.0.1:8080", lockgate.WithAPIKey("k-1"))
	lock, err := gw.TryLock(context.Background(), "reports:nightly", lockgate.TTL(10*time.Second))
	var problem *lockgate.Problem
	if errors.As(err, &problem) && errors.Is(err, lockgate.ErrLockHeld) {
		fmt.Printf("held; the holder's lease has %v left\n", problem.RetryAfter)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.Background())
	// ... the nightly report, once across all instances
}

func ExampleLock_Err() {
	gw := lockgate.New("http://127.0.0.1:8080")
	lock, err := gw.Lock(context.Background(), "inv:42")
	if err != nil {
		log.Fatal(err)
	}
	<-lock.Done()
	var lost *lockgate.LostError
	switch err := lock.Err(); {
	case errors.As(err, &lost):
		fmt.Println("lost:", lost.Reason) // revoked, lock-gone, connection-lost, lease-expired, ...
	case errors.Is(err, lockgate.ErrReleased):
		fmt.Println("released")
	}
}

func ExampleGateway_Lease() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx := context.Background()
	// A lease outlives this process's connection; its holder extends it.
	lease, err := gw.Lease(ctx, "batch:7", lockgate.TTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	for step := 0; step < 10; step++ {
		if err := lease.Extend(ctx, time.Minute); err != nil {
			log.Fatal(err) // errors.Is(err, lockgate.ErrLockLost): stop working
		}
	}
	_ = lease.Release(ctx)
}

func ExampleGateway_Session() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx := context.Background()
	sess, err := gw.Session(ctx, lockgate.SessionTTL(10*time.Second), lockgate.Value("10.0.0.7"))
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close(context.Background()) // releases both locks at once

	from, err := sess.Lock(ctx, "acct:1", lockgate.Wait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	to, err := sess.Lock(ctx, "acct:2", lockgate.Wait(5*time.Second))
	var deadlock *lockgate.DeadlockError
	if errors.As(err, &deadlock) {
		log.Printf("another session holds one of %v and waits for ours", deadlock.Cycle)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	// The session's Context (and each lock's) is cancelled once the
	// session is lost.
	var db store
	_ = db.Write(sess.Context(), "debit", from.FencingToken())
	_ = db.Write(sess.Context(), "credit", to.FencingToken())
}

func ExampleGateway_LockAll() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx := context.Background()
	set, err := gw.LockAll(ctx, lockgate.Keys("acct:1", "acct:2"), lockgate.TTL(30*time.Second), lockgate.Wait(5*time.Second))
	if err != nil {
		var problem *lockgate.Problem
		if errors.Is(err, lockgate.ErrLockHeld) && errors.As(err, &problem) {
			log.Fatalf("%s was held for 5 s; neither lock was taken", problem.Key)
		}
		log.Fatal(err)
	}
	defer set.Release(context.Background())
	// The gateway renews both; set.Context() is cancelled once either is lost.
	var db store
	if err := db.Write(set.Context(), "debit acct:1", set.FencingToken("acct:1")); err != nil {
		log.Printf("stopped: %v", set.Err()) // a *lockgate.LostError naming the lock that was lost
		return
	}
	_ = db.Write(set.Context(), "credit acct:2", set.FencingToken("acct:2"))
}

func ExampleGateway_List() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx := context.Background()
	page, err := gw.List(ctx, "orders:", lockgate.PageSize(100))
	for err == nil {
		for _, lock := range page.Locks {
			fmt.Println(lock.Key, lock.Holders, lock.FencingToken)
		}
		if !page.More() {
			break
		}
		page, err = page.Next(ctx) // or, elsewhere: gw.List(ctx, "orders:", lockgate.Cursor(page.NextCursor))
	}
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleGateway_Watch() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	events, err := gw.Watch(ctx, "inv:42")
	if err != nil {
		log.Fatal(err)
	}
	for event := range events {
		if event.Err != nil {
			log.Fatal(event.Err)
		}
		fmt.Println(event.Type, event.FencingToken, event.Value)
		// event.ID resumes a later watch: gw.Watch(ctx, key, lockgate.LastEventID(id))
	}
}

func ExampleGateway_Campaign() {
	gw := lockgate.New("http://127.0.0.1:8080")
	ctx := context.Background()
	leadership, err := gw.Campaign(ctx, "scheduler", "10.0.0.7:9000", lockgate.TTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer leadership.Resign(context.Background())
	// Lead until the office is lost; write with the term as fencing token.
	var db store
	for leadership.Context().Err() == nil {
		_ = db.Write(leadership.Context(), "tick", leadership.Term())
		time.Sleep(time.Second)
	}
}

func ExampleGateway_Observe() {
	gw := lockgate.New("http://127.0.0.1:8080")
	leaders, err := gw.Observe(context.Background(), "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	for leader := range leaders {
		if leader == (lockgate.Leader{}) {
			fmt.Println("no leader")
			continue
		}
		fmt.Printf("leader %s, term %d\n", leader.Value, leader.Term)
	}
}

func ExampleTLSConfigFromFiles() {
	cfg, err := lockgate.TLSConfigFromFiles("ca.pem", "client.pem", "client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	gw := lockgate.New("https://locks.internal:8443", lockgate.WithTLS(cfg))
	_ = gw
}
