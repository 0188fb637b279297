// Leader election: a leader in a process of its own is killed, and the
// other candidate is elected with a larger term; observers follow every
// change of leader.

package lockgate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"lockgate"
)

// candidateEnv, when set ("URL|KEY|VALUE|TTL"), makes the test binary a
// candidate for leader: it campaigns, prints {"term": N} once elected, and
// leads until killed, as a crashed leader dies.
const candidateEnv = "LOCKGATE_TEST_CANDIDATE"

func runCandidate(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "want URL|KEY|VALUE|TTL")
		return 2
	}
	ttl, err := time.ParseDuration(parts[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	leadership, err := lockgate.New(parts[0]).Campaign(context.Background(), parts[1], parts[2], lockgate.TTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]uint64{"term": leadership.Term()})
	<-leadership.Done()
	fmt.Fprintln(os.Stderr, leadership.Err())
	return 3
}

// startCandidate runs a candidate process; its term comes on the channel
// once it is elected.
func startCandidate(t *testing.T, url, key, value string) (*exec.Cmd, <-chan uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), candidateEnv+"="+strings.Join([]string{url, key, value, "2s"}, "|"))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = dieWithParent()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	elected := make(chan uint64, 1)
	go func() {
		var line struct {
			Term uint64 `json:"term"`
		}
		if json.NewDecoder(bufio.NewReader(stdout)).Decode(&line) == nil {
			elected <- line.Term
		}
	}()
	return cmd, elected
}

func TestTheOtherCandidateIsElectedWithALargerTermWhenTheLeaderIsKilled(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	ctx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()
	leaders, err := gw.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []lockgate.Leader
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for leader := range leaders {
			mu.Lock()
			seen = append(seen, leader)
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	eventually(t, 5*time.Second, "the first observation", func() bool { return count() == 1 })

	first, elected := startCandidate(t, gw.URL(), key, "10.0.0.7:9000")
	var firstTerm uint64
	select {
	case firstTerm = <-elected:
	case <-time.After(10 * time.Second):
		t.Fatal("the first candidate was not elected")
	}
	if leader, err := gw.Leader(context.Background(), key); err != nil || leader != (lockgate.Leader{Value: "10.0.0.7:9000", Term: firstTerm}) {
		t.Fatalf("leader %+v, %v", leader, err)
	}

	positions := make(chan int, 8)
	campaign := make(chan *lockgate.Leadership, 1)
	go func() {
		leadership, err := gw.Campaign(context.Background(), key, "10.0.0.8:9000",
			lockgate.TTL(2*time.Second), lockgate.OnQueued(func(position int) { positions <- position }))
		if err != nil {
			t.Error(err)
		}
		campaign <- leadership
	}()
	select {
	case position := <-positions:
		if position != 1 {
			t.Fatalf("queued at %d", position)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second candidate did not wait in the queue")
	}

	_ = first.Process.Kill()
	var leadership *lockgate.Leadership
	select {
	case leadership = <-campaign:
	case <-time.After(5 * time.Second):
		t.Fatal("the second candidate was not elected after the leader was killed")
	}
	if leadership == nil {
		t.FailNow()
	}
	if leadership.Term() <= firstTerm || leadership.Value() != "10.0.0.8:9000" {
		t.Fatalf("term %d after %d, value %q", leadership.Term(), firstTerm, leadership.Value())
	}
	if err := leadership.Proclaim(context.Background(), "10.0.0.8:9001"); err != nil {
		t.Fatal(err)
	}
	if err := leadership.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(leadership.Err(), lockgate.ErrReleased) {
		t.Fatalf("resigning is not losing: %v", leadership.Err())
	}

	eventually(t, 5*time.Second, "observers saw every change", func() bool { return count() >= 6 })
	stopObserving()
	doneWithin(t, observed, 5*time.Second, "the observation ends with its context")
	want := []lockgate.Leader{
		{},
		{Value: "10.0.0.7:9000", Term: firstTerm},
		{},
		{Value: "10.0.0.8:9000", Term: leadership.Term()},
		{Value: "10.0.0.8:9001", Term: leadership.Term()},
		{},
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("observed %+v\nwant %+v", seen, want)
	}
}

func TestACampaignGivenUpIsNeverElected(t *testing.T) {
	gw := sharedGateway(t)
	key := uniqueKey(t)
	leader, err := gw.Campaign(context.Background(), key, "leader")
	if err != nil {
		t.Fatal(err)
	}
	ctx, giveUp := context.WithCancel(context.Background())
	queued := make(chan int, 8)
	done := make(chan error, 1)
	go func() {
		_, err := gw.Campaign(ctx, key, "quitter", lockgate.OnQueued(func(p int) { queued <- p }))
		done <- err
	}()
	select {
	case <-queued:
	case <-time.After(5 * time.Second):
		t.Fatal("not queued")
	}
	giveUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a campaign given up returned %v", err)
	}
	queueEmpties(t, gw, key)
	if err := leader.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if now, err := gw.Leader(context.Background(), key); err != nil || now != (lockgate.Leader{}) {
		t.Fatalf("leader after the only leader resigned: %+v, %v", now, err)
	}
}
