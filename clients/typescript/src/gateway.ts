/**
 * `Gateway`: the client of one lockgate address. Streamed locks
 * (`acquire`, `using`), several at once (`lockAll`, `usingAll`), sessions
 * (`openSession`, `session`), the plain lease API (`leases`), reading
 * locks (`inspect`, `list`), revoking them (`revoke`), watching (`watch`)
 * and leader election (`election`).
 */

import { LockSet, batchBody, type LockAllOptions } from "./batch.js";
import { Election, type ElectionOptions } from "./election.js";
import { GatewayUnavailableError, LockgateError, errorFromProblem, hasSlug, type Problem } from "./errors.js";
import { holding, type Routine } from "./holding.js";
import type { Hold } from "./hold.js";
import { NotAStreamError, Transport, lockPath, unreachable } from "./http.js";
import { parseGatewayJson, readGatewayJson } from "./json.js";
import { Leases, acquireBody } from "./leases.js";
import { Lock, type LockLink, type SessionLease } from "./lock.js";
import { Session, type SessionLink, type SessionOptions } from "./session.js";
import { readEvents, type ServerSentEvent } from "./sse.js";
import type {
  BatchGrant,
  BatchLockSpec,
  FreeLock,
  Grant,
  LockOptions,
  LockPage,
  LockStatus,
  LockStreamEventName,
  QueuedData,
  SessionBody,
  SessionGrant,
  SessionStreamEventName,
} from "./types.js";
import { LockWatch, type WatchOptions } from "./watch.js";
import type { Dispatcher } from "undici-types";

/** What a lock or a set taken through a `Session` is told of it: its lease, and whom to tell of its end. */
interface SessionHold {
  lease: SessionLease;
  ended: (hold: Hold) => void;
}

/** A stream that answered its first event: the grant, and what reads on. */
interface OpenedStream<T> {
  first: T;
  stream: AbortController;
  events: AsyncGenerator<ServerSentEvent>;
  timing: { sentAt: number; receivedAt: number };
}

export interface GatewayOptions {
  /** Sent as `Authorization: Bearer <apiKey>`, for a gateway with API keys. */
  apiKey?: string;
  /**
   * How long any one call may take to be answered, in milliseconds, on top
   * of the wait it asks for (default 10 000).
   */
  timeoutMs?: number;
  /**
   * Told of errors that cannot be thrown without hiding another: a release
   * that failed after the routine of `using` threw, or an `onQueued`
   * callback that threw. By default they become a process warning
   * (`process.emitWarning`).
   */
  onError?: (error: unknown) => void;
  /**
   * The undici dispatcher every request goes through (`fetch`'s
   * `dispatcher`): an `Agent` from the `undici` package with `connect`
   * options for a gateway served over HTTPS, such as
   * `new Agent({ connect: { ca, cert, key } })` for a private CA and a
   * client certificate.
   */
  dispatcher?: Dispatcher;
}

/** A lockgate gateway, by its base URL (`http://127.0.0.1:8080`). */
export class Gateway {
  /** The plain lease API: acquire, extend and release with a token. */
  readonly leases: Leases;
  private readonly transport: Transport;
  private readonly onError: (error: unknown) => void;

  constructor(url: string, options: GatewayOptions = {}) {
    this.transport = new Transport(url, options.apiKey, options.timeoutMs ?? 10_000, options.dispatcher);
    this.leases = new Leases(this.transport);
    this.onError = options.onError ?? reportAsWarning;
  }

  /** The gateway's base URL. */
  get url(): string {
    return this.transport.baseUrl;
  }

  /**
   * Takes `key` as a streamed lock: the gateway renews it for as long as the
   * returned `Lock` is held, and `lock.signal` aborts if it is lost. Rejects
   * with `LockHeldError` when the lock is held and the wait (`waitMs`,
   * default 0) runs out.
   */
  acquire(key: string, options: LockOptions = {}): Promise<Lock> {
    return this.takeLock(key, options, undefined);
  }

  /**
   * A streamed lock; `session` is set for one taken through a `Session`,
   * which watches the lease and hears when the lock ends.
   */
  private async takeLock(key: string, options: LockOptions, session: SessionHold | undefined): Promise<Lock> {
    const opened = await this.openStreamed(
      "/locks",
      acquireBody(key, options),
      { signal: options.signal, waitMs: options.waitMs ?? 0 },
      "a grant",
      (events) => this.awaitGrant(events, options),
    );
    const link: LockLink = {
      release: (lockKey, token) => this.leases.releaseAll(lockKey, token),
      setValue: async (lockKey, token, value) => {
        await this.leases.setValue(lockKey, token, value);
      },
      changeMode: (lockKey, token, mode, waitMs) => this.leases.changeMode(lockKey, token, mode, { waitMs }),
      ...(session ? { ended: session.ended } : {}),
    };
    const terms = {
      mode: options.mode ?? "exclusive",
      value: options.value,
      permits: options.permits,
      // A lock on a session kept alive elsewhere has no lease to watch here.
      ...(options.session !== undefined ? { session: { lease: session?.lease } } : {}),
    };
    return new Lock(opened.first, terms, opened.timing, opened.stream, opened.events, link);
  }

  /** A streamed batch; `session` as for `takeLock`. */
  private async takeAll(
    locks: readonly (string | BatchLockSpec)[],
    options: LockAllOptions,
    session: SessionHold | undefined,
  ): Promise<LockSet> {
    const body = batchBody(locks, options);
    const opened = await this.openStreamed(
      "/locks/batch",
      body,
      { signal: options.signal, waitMs: options.waitMs ?? 0 },
      "the batch's grant",
      awaitBatchGrant,
    ).catch((error: unknown) => this.unstreamedBatch(error));
    const link = {
      release: (key: string, token: string) => this.leases.releaseAll(key, token),
      ...(session ? { ended: session.ended } : {}),
    };
    const inSession = body.session === undefined ? undefined : { lease: session?.lease };
    const set = new LockSet(opened.first, inSession, opened.timing, opened.stream, opened.events, link);
    // A session kept by the caller, not a `Session`: its signal is the session's loss.
    if (!session && typeof options.session === "object") set.hold.endsWith(options.session.signal);
    return set;
  }

  /**
   * A gateway from before streamed batches answers a streamed batch as a
   * plain one, whose locks nothing would renew: they are given back, and
   * the batch is refused as the gateway's (another instance, once upgraded,
   * may stream it).
   */
  private async unstreamedBatch(error: unknown): Promise<never> {
    if (!(error instanceof NotAStreamError) || error.answer.status !== 201) throw error;
    const grant = readGatewayJson<BatchGrant>(error.answer.text);
    await Promise.allSettled(grant.locks.map((lock) => this.leases.releaseAll(lock.key, grant.token)));
    throw new GatewayUnavailableError(
      `the gateway at ${this.url} does not stream batches (a version before them): ` +
        `the locks it granted (${grant.locks.map((lock) => lock.key).join(", ")}) were given back`,
      { cause: error },
    );
  }

  /**
   * Opens a session held through a streamed session: the gateway keeps it
   * alive for as long as the returned `Session` is open, and
   * `session.signal` (with the signal of every lock taken through it)
   * aborts if it is lost. End it with `session.end()` or `await using`.
   */
  async openSession(options: SessionOptions = {}): Promise<Session> {
    const opened = await this.openStreamed(
      "/sessions",
      sessionBody(options),
      { signal: options.signal, waitMs: 0 },
      "the session",
      (events) => awaitOpened(events),
    );
    return new Session(opened.first, opened.timing, opened.stream, opened.events, this.sessionLink);
  }

  /**
   * Runs `routine` with a session open and ends it afterwards (releasing
   * every lock taken through it), whatever happens. Resolves with the
   * routine's result. Rejects with the routine's own error if it threw
   * (a failure to end the session then goes to `onError`, never over it);
   * with the session's `LockLostError` if the session was lost while the
   * routine ran; or with the failure to end it.
   */
  async session<T>(options: SessionOptions, routine: Routine<Session, T>): Promise<T>;
  async session<T>(routine: Routine<Session, T>): Promise<T>;
  async session<T>(optionsOrRoutine: SessionOptions | Routine<Session, T>, maybeRoutine?: Routine<Session, T>): Promise<T> {
    return holding(optionsOrRoutine, maybeRoutine, {
      what: "session(options, routine)",
      take: (options) => this.openSession(options),
      giveBack: (session) => session.end(),
      report: (error) => this.report(error),
    });
  }

  /** What a `Session` asks of this gateway. */
  private readonly sessionLink: SessionLink = {
    acquire: (key, options, lease, ended) => this.takeLock(key, options, { lease, ended }),
    lockAll: (locks, options, lease, ended) => this.takeAll(locks, options, { lease, ended }),
    end: async (id) => {
      try {
        await this.transport.request("DELETE", `/sessions/${encodeURIComponent(id)}`);
      } catch (error) {
        // Already over (expired, or ended elsewhere): nothing is left to end.
        if (!hasSlug(error, "session-not-found")) throw error;
      }
    },
    report: (error) => this.report(error),
  };

  /**
   * Sends `body` to `path` asking for an event stream, and reads it up to
   * its first event with `first`. Until then the caller's signal and our
   * own timeout (`waitMs` + `timeoutMs`) both close the stream, and a
   * closed stream is granted nothing.
   */
  private async openStreamed<T>(
    path: string,
    body: unknown,
    options: { signal: AbortSignal | undefined; waitMs: number },
    what: string,
    first: (events: AsyncGenerator<ServerSentEvent>) => Promise<T>,
  ): Promise<OpenedStream<T>> {
    const stream = new AbortController();
    const limitMs = options.waitMs + this.transport.timeoutMs;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      stream.abort();
    }, limitMs);
    const cancel = () => stream.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", cancel, { once: true });
    try {
      options.signal?.throwIfAborted();
      const sentAt = performance.now();
      const response = await this.transport.openStream("POST", path, { body, signal: stream.signal });
      const events = readEvents(response.body as ReadableStream<Uint8Array>);
      const value = await first(events);
      return { first: value, stream, events, timing: { sentAt, receivedAt: performance.now() } };
    } catch (error) {
      stream.abort();
      if (options.signal?.aborted) throw options.signal.reason;
      if (timedOut) {
        throw new GatewayUnavailableError(`no answer with ${what} from the gateway at ${this.url} within ${limitMs} ms`, {
          cause: error,
        });
      }
      if (error instanceof LockgateError) throw error;
      throw unreachable(this.url, error);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", cancel);
    }
  }

  /** Reads the stream up to its grant: `queued` events, then `acquired` or `refused`. */
  private async awaitGrant(events: AsyncGenerator<ServerSentEvent>, options: LockOptions): Promise<Grant> {
    for (;;) {
      const next = await events.next();
      if (next.done) throw new GatewayUnavailableError("the lock's stream ended before a grant");
      const { data } = next.value;
      const event = next.value.event as LockStreamEventName;
      if (event === "acquired") return readGatewayJson<Grant>(data);
      if (event === "refused") throw errorFromProblem(parseGatewayJson(data) as Problem);
      if (event === "queued" && options.onQueued) {
        const { position } = readGatewayJson<QueuedData>(data);
        try {
          options.onQueued(position);
        } catch (error) {
          // The caller's callback failing is no reason to give up the place in the queue.
          this.report(error);
        }
      }
    }
  }

  /**
   * Runs `routine` under the lock and releases it afterwards, whatever
   * happens. The routine gets the `Lock`: pass `lock.signal` to what it
   * awaits, and `lock.fencingToken` to what it writes.
   *
   * Resolves with the routine's result. Rejects with the routine's own error
   * if it threw (a release failure then goes to `onError`, never over it);
   * with `LockLostError` if the lock was lost while the routine ran (its
   * result was made without the lock); or with the release's error.
   */
  async using<T>(key: string, options: LockOptions, routine: Routine<Lock, T>): Promise<T>;
  async using<T>(key: string, routine: Routine<Lock, T>): Promise<T>;
  async using<T>(key: string, optionsOrRoutine: LockOptions | Routine<Lock, T>, maybeRoutine?: Routine<Lock, T>): Promise<T> {
    return holding(optionsOrRoutine, maybeRoutine, {
      what: "using(key, options, routine)",
      take: (options) => this.acquire(key, options),
      giveBack: (lock) => lock.release(),
      report: (error) => this.report(error),
    });
  }

  /**
   * Takes several locks at once through a streamed batch (`POST
   * /locks/batch` answered as an event stream): every one or none, for one
   * owner token, held as one lock is held: the gateway renews them all for
   * as long as the returned `LockSet` is held, and `set.signal` aborts if
   * any of them is lost (the gateway then gives back the others). Each lock
   * is a key, or `{ key, mode, limit, permits }`. `waitMs` is the whole
   * batch's budget; batches naming the same keys in any order never
   * deadlock each other. Rejects with `LockHeldError` (its `problem.key`
   * names the lock that was held) or `DeadlockError`, and then holds none
   * of them. With a `Session` as `session`, it is `session.lockAll`.
   */
  lockAll(locks: readonly (string | BatchLockSpec)[], options: LockAllOptions = {}): Promise<LockSet> {
    const { session } = options;
    if (session instanceof Session) {
      const { session: _, ttlMs: __, ...rest } = options;
      return session.lockAll(locks, rest);
    }
    return this.takeAll(locks, options, undefined);
  }

  /**
   * Runs `routine` with several locks held (`lockAll`) and releases them all
   * afterwards, whatever happens, as `using` does for one lock.
   */
  async usingAll<T>(locks: readonly (string | BatchLockSpec)[], options: LockAllOptions, routine: Routine<LockSet, T>): Promise<T>;
  async usingAll<T>(locks: readonly (string | BatchLockSpec)[], routine: Routine<LockSet, T>): Promise<T>;
  async usingAll<T>(
    locks: readonly (string | BatchLockSpec)[],
    optionsOrRoutine: LockAllOptions | Routine<LockSet, T>,
    maybeRoutine?: Routine<LockSet, T>,
  ): Promise<T> {
    return holding(optionsOrRoutine, maybeRoutine, {
      what: "usingAll(locks, options, routine)",
      take: (options) => this.lockAll(locks, options),
      giveBack: (set) => set.release(),
      report: (error) => this.report(error),
    });
  }

  /**
   * Revokes `key`, an operator's action with the gateway's admin token
   * (`DELETE /locks/{key}?force=true`): ends every hold of it at once, or
   * with `fencingToken` only the hold with that fencing token (the one
   * `inspect` showed stuck), never another holder's. Each streamed holder's
   * `signal` aborts with a `LockLostError` (`revoked`), watchers get
   * `revoked`, and the next grant's fencing token is larger than any
   * before. Resolves with `true`, or `false` when there was nothing to end
   * (the lock is free, or that hold is gone). Rejects with
   * `InvalidRequestError` when the token is not the admin token
   * (`unauthorized`, `forbidden`) or the gateway has none
   * (`administration-disabled`).
   */
  async revoke(
    key: string,
    adminToken: string,
    options: { fencingToken?: bigint | number; signal?: AbortSignal } = {},
  ): Promise<boolean> {
    const query = new URLSearchParams({ force: "true" });
    if (options.fencingToken !== undefined) {
      // BigInt refuses a fraction; the gateway, anything below 1.
      const fencingToken = BigInt(options.fencingToken);
      if (fencingToken < 1n) throw new RangeError(`revoke: a fencing token is 1 or more, not ${fencingToken}`);
      query.set("fencing_token", String(fencingToken));
    }
    try {
      await this.transport.request("DELETE", lockPath(key, `?${query}`), {
        headers: { authorization: `Bearer ${adminToken}` },
        signal: options.signal,
      });
      return true;
    } catch (error) {
      if (hasSlug(error, "lock-not-found")) return false;
      throw error;
    }
  }

  /**
   * The lock as `GET /locks/{key}` shows it: its holders and waiters
   * (`held: true`); `held: false` with `delayedUntilMs` while nobody holds
   * it but a lock-delay keeps it unavailable (a session that held it
   * expired); `null` when it is free.
   */
  async inspect(key: string, options: { signal?: AbortSignal } = {}): Promise<LockStatus | FreeLock | null> {
    try {
      const answer = await this.transport.request("GET", lockPath(key), { signal: options.signal });
      return readGatewayJson<LockStatus | FreeLock>(answer.text);
    } catch (error) {
      if (hasSlug(error, "lock-not-found")) return null;
      throw error;
    }
  }

  /**
   * The held locks whose key starts with `prefix`, fetched a page
   * (`pageSize`, default 100) at a time as the iteration goes.
   */
  async *list(options: { prefix?: string; pageSize?: number; signal?: AbortSignal } = {}): AsyncGenerator<LockStatus> {
    let cursor: string | null = null;
    do {
      const query = new URLSearchParams({ prefix: options.prefix ?? "", limit: String(options.pageSize ?? 100) });
      if (cursor !== null) query.set("cursor", cursor);
      const answer = await this.transport.request("GET", `/locks?${query}`, { signal: options.signal });
      const page = readGatewayJson<LockPage>(answer.text);
      yield* page.locks;
      cursor = page.nextCursor;
    } while (cursor !== null);
  }

  /** Follows the lock's events (`GET /locks/{key}/events`), resuming after dropped connections. */
  watch(key: string, options: WatchOptions = {}): LockWatch {
    return new LockWatch(this.transport, key, options);
  }

  /** Leader election on `key`: campaign, resign, and observe who leads. */
  election(key: string, options: ElectionOptions = {}): Election {
    return new Election(this, key, options);
  }

  /** @internal */
  report(error: unknown): void {
    try {
      this.onError(error);
    } catch {
      // A failing error handler must not replace the error being thrown.
    }
  }
}

/** Reads a streamed batch up to its grant (`acquired`). */
async function awaitBatchGrant(events: AsyncGenerator<ServerSentEvent>): Promise<BatchGrant> {
  for (;;) {
    const next = await events.next();
    if (next.done) throw new GatewayUnavailableError("the batch's stream ended before a grant");
    const { event, data } = next.value;
    if ((event as LockStreamEventName) === "acquired") return readGatewayJson<BatchGrant>(data);
    if ((event as LockStreamEventName) === "refused") throw errorFromProblem(parseGatewayJson(data) as Problem);
  }
}

/** Reads a streamed session up to its `opened` event. */
async function awaitOpened(events: AsyncGenerator<ServerSentEvent>): Promise<SessionGrant> {
  for (;;) {
    const next = await events.next();
    if (next.done) throw new GatewayUnavailableError("the session's stream ended before it was opened");
    if ((next.value.event as SessionStreamEventName) === "opened") return readGatewayJson<SessionGrant>(next.value.data);
  }
}

/** The body of `POST /sessions`, from the options. */
function sessionBody(options: SessionOptions): SessionBody {
  const body: SessionBody = {};
  if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
  if (options.lockDelayMs !== undefined) body.lock_delay_ms = options.lockDelayMs;
  if (options.value !== undefined) body.value = options.value;
  return body;
}

function reportAsWarning(error: unknown): void {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  if (typeof process !== "undefined" && typeof process.emitWarning === "function") {
    process.emitWarning(`lockgate: ${text}`, { code: "LOCKGATE_UNTHROWN_ERROR" });
  } else {
    console.warn(`lockgate: ${text}`);
  }
}
