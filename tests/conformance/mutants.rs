//! Mutants of the lock library: each a patch of its Lua source that breaks one rule the model follows, loaded in place of the real library (under its name, so the wrappers run it). The harness must tell each from the model within a bounded number of seeded sequences; a patch that no longer applies (its text changed) fails its test, to be written anew.

/// One mutant: its name, what it breaks, and its patches (each text found
/// exactly once in the library, and what replaces it).
pub struct Mutant {
    pub name: &'static str,
    pub breaks: &'static str,
    pub patches: &'static [(&'static str, &'static str)],
}

impl Mutant {
    /// `source` with the patches applied.
    pub fn apply(&self, source: &str) -> String {
        let mut patched = source.to_owned();
        for (from, to) in self.patches {
            assert_eq!(
                patched.matches(from).count(),
                1,
                "mutant {}: `{from}` is not in the lock library exactly once",
                self.name
            );
            patched = patched.replacen(from, to, 1);
        }
        patched
    }
}

/// `lib/queue.lua` `standing`: every waiter is taken for present.
pub const PRESENCE_SKIPPED: Mutant = Mutant {
    name: "presence-skipped",
    breaks: "a waiter whose instance's presence lapsed is served as if present",
    patches: &[(
        "if presence >= now then\n    return 'here'",
        "if true then\n    return 'here'",
    )],
};

/// `lib/holders.lua` `next_fence`: a grant gets the last fencing token again.
pub const FENCE_NOT_RAISED: Mutant = Mutant {
    name: "fence-not-raised",
    breaks: "a new grant's fencing token is the last one, not a larger one",
    patches: &[
        ("if last < now_us then", "if last == 0 then"),
        ("local fence = last + 1", "local fence = last"),
    ],
};

/// `lib/queue.lua` `serve`: the queue is served from its tail.
pub const OUT_OF_ORDER: Mutant = Mutant {
    name: "out-of-order",
    breaks: "a freed place goes to the last waiter, not the first",
    patches: &[(
        "local head = redis.call('ZRANGE', ctx.queue, index, index)[1]",
        "local head = redis.call('ZRANGE', ctx.queue, -1 - index, -1 - index)[1]",
    )],
};

/// `lib/holders.lua` `delay_until`: no lock-delay is ever kept.
pub const LOCK_DELAY_IGNORED: Mutant = Mutant {
    name: "lock-delay-ignored",
    breaks: "a session's expiry (or a revocation) frees its lock with no lock-delay",
    patches: &[(
        "if until_ms <= now_ms(ctx) then\n    return",
        "if true then\n    return",
    )],
};

/// `session_release.lua`: the session's end leaves its holder in place.
pub const SESSION_END_IGNORED: Mutant = Mutant {
    name: "session-end-ignored",
    breaks: "a session's end answers `ended` but its holder keeps the lock",
    patches: &[(
        "take_place(ctx, token, place, why == 'expired' and 'expired' or 'ended')",
        "-- (the mutant leaves the place as it is)",
    )],
};

/// `lib/queue.lua` `offer`: an offer stands for the waiter's whole lease.
pub const OFFER_WHOLE_LEASE: Mutant = Mutant {
    name: "offer-whole-lease",
    breaks: "a place offered from the queue is kept the whole lease, not OFFER_MS",
    patches: &[(
        "local lease = outright and waiter.ttl or math.min(waiter.ttl, OFFER_MS)",
        "local lease = waiter.ttl",
    )],
};

/// `lib/queue.lua` `standing`: an away waiter loses its place at once
/// (the protocol as it was before the model).
pub const AWAY_DROPPED: Mutant = Mutant {
    name: "away-dropped",
    breaks: "a waiter whose instance's presence lapsed is dropped, not passed over",
    patches: &[(
        "if presence + AWAY_MS >= now then\n    return 'away'",
        "if false then\n    return 'away'",
    )],
};

/// `lib/queue.lua` `serve`: a waiter whose instance takes a grant
/// outright is granted its whole lease however long ago its presence was
/// renewed (the freshness check skipped).
pub const FRESHNESS_SKIPPED: Mutant = Mutant {
    name: "freshness-skipped",
    breaks: "a waiter whose instance's presence is current but not fresh is granted outright, not offered the place",
    patches: &[(
        "local outright = waiter.one == 1 and presence >= now_ms(ctx) + PRESENCE_MS - FRESH_MS",
        "local outright = waiter.one == 1",
    )],
};

/// `acquire_plain.lua`: a plain try that looks only at the lock, not at
/// its queue or watch (of the plain scripts against the full ones).
pub const PLAIN_TRY_IGNORES_QUEUE: Mutant = Mutant {
    name: "plain-try-ignores-queue",
    breaks: "a plain try takes a free lock a waiter waits for",
    patches: &[(
        "if redis.call('EXISTS', lock, KEYS[3], KEYS[4]) > 0 then",
        "if redis.call('EXISTS', lock) > 0 then",
    )],
};

/// `lib/plain.lua`: a plain release that frees a lock somebody
/// waits for or watches (of the plain scripts against the full ones).
pub const PLAIN_RELEASE_IGNORES_WAITERS: Mutant = Mutant {
    name: "plain-release-ignores-waiters",
    breaks: "a plain release frees the lock without serving its queue or telling its watchers",
    patches: &[(
        "if redis.call('EXISTS', queue, watch) > 0 then",
        "if false then",
    )],
};
