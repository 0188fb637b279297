package lockgate;

import java.time.Duration;

/** A candidate in a process of its own, for a test to kill: it campaigns, prints its term, and leads until killed. */
public final class Candidate {
    private Candidate() {}

    public static void main(String[] args) throws Exception {
        Gateway gw = Gateway.create(args[0]);
        Leadership leadership = gw.election(args[1], LockOptions.ttl(Duration.ofSeconds(30))).campaign(args[2]);
        System.out.println("leader " + leadership.term());
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
