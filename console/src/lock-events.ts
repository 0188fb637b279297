/**
 * Following one lock's events (`GET /locks/{key}/events`) for as long as
 * its page is open.
 *
 * The stream is read with `fetch` (so it can carry the token) and parsed by
 * the TypeScript client's event stream reader. When it breaks (the gateway
 * restarted, a proxy cut it, nothing arrived for longer than the keep-alive
 * allows) it is opened again after a back-off with `Last-Event-ID`, so the
 * events missed meanwhile arrive once each, through whichever instance
 * answers.
 */

import { parseGatewayJson } from "../../clients/typescript/src/json";
import { EventStreamParser, readEvents, type ServerSentEvent } from "../../clients/typescript/src/sse";
import type { Context } from "./context";
import { type FencingToken, type FreeLock, GatewayUnreachable, type HeldLock, type Problem, Refusal } from "./gateway";
import { Backoff, sleep } from "./link";

/** Longer than the gateway's keep-alive (15 s by default) with room to spare. */
const SILENCE_MS = 50_000;

/** `acquired`: a holder was granted the lock. */
export interface Acquired {
  key: string;
  fencing_token: FencingToken;
  value: string | null;
  /** `exclusive`, `shared`, or `counted` for a counting lock. */
  mode: string;
  expires_at_ms: number;
}

/** `value`: a holder replaced its public value. */
export interface ValueChanged {
  key: string;
  fencing_token: FencingToken;
  value: string | null;
}

/** `released`, `expired` or `revoked`: the place of the holder with this fencing token ended. */
export interface HolderLeft {
  key: string;
  fencing_token: FencingToken;
}

/** `delayed`: the lock is free, but nobody is granted it until `delayed_until_ms` (a lock-delay). */
export interface Delayed {
  key: string;
  delayed_until_ms: number;
}

/** An event of the lock; `id` is its own id (`gap` has none). */
export type LockEvent = { id: string | undefined } & (
  | { name: "snapshot"; data: HeldLock | FreeLock }
  | { name: "acquired"; data: Acquired }
  | { name: "value"; data: ValueChanged }
  | { name: "released" | "expired" | "revoked"; data: HolderLeft }
  | { name: "delayed"; data: Delayed }
  | { name: "gap"; data: Record<string, never> }
);

export type LockEventName = LockEvent["name"];

/** The events this page knows; any other the stream may bring is passed over. */
const NAMES = new Set<string>(
  Object.keys({
    snapshot: true,
    acquired: true,
    value: true,
    released: true,
    expired: true,
    revoked: true,
    delayed: true,
    gap: true,
  } satisfies Record<LockEventName, true>),
);

export type StreamState =
  | { kind: "opening" }
  | { kind: "open"; resumedAfter: string | undefined }
  | { kind: "broken"; reason: string; retryInMs: number }
  | { kind: "refused"; problem: Problem };

export interface LockEventHandlers {
  onEvent(event: LockEvent): void;
  onStreamState(state: StreamState): void;
}

/**
 * Follows the lock's events until `signal` aborts: every event to
 * `onEvent`, and the stream's state (opening, open, broken, refused) to
 * `onStreamState`.
 */
export function followLockEvents(
  key: string,
  context: Context,
  signal: AbortSignal,
  handlers: LockEventHandlers,
): Promise<void> {
  return new LockEventFollower(key, context, signal, handlers).run();
}

/** The stream broke while being read; `lastEventId` is where to resume. */
class StreamBroken extends Error {
  constructor(
    message: string,
    readonly lastEventId: string | undefined,
  ) {
    super(message);
  }
}

class LockEventFollower {
  private readonly backoff = new Backoff();

  constructor(
    private readonly key: string,
    private readonly context: Context,
    private readonly signal: AbortSignal,
    private readonly handlers: LockEventHandlers,
  ) {}

  async run(): Promise<void> {
    let lastEventId: string | undefined;
    while (!this.signal.aborted) {
      this.handlers.onStreamState({ kind: "opening" });
      let reason: string;
      try {
        lastEventId = await this.followOnce(lastEventId);
        if (this.signal.aborted) return;
        reason = "the gateway ended the stream";
      } catch (error) {
        if (this.signal.aborted) return;
        if (error instanceof Refusal && error.isAccessDenied) {
          this.handlers.onStreamState({ kind: "refused", problem: error.problem });
          await this.context.token.changed(this.signal);
          continue;
        }
        if (error instanceof Refusal) {
          this.handlers.onStreamState({ kind: "refused", problem: error.problem });
          reason = error.problem.title;
        } else if (error instanceof GatewayUnreachable) {
          reason = error.message;
        } else if (error instanceof StreamBroken) {
          lastEventId = error.lastEventId;
          reason = error.message;
        } else {
          throw error;
        }
      }
      const retryInMs = this.backoff.next();
      this.handlers.onStreamState({ kind: "broken", reason, retryInMs });
      await sleep(retryInMs, this.signal);
    }
  }

  /** Opens the stream once and reads it until it ends; returns the id to resume after. */
  private async followOnce(resumeAfter: string | undefined): Promise<string | undefined> {
    // Aborted when the page goes, or when the connection falls silent.
    const connection = new AbortController();
    const stop = () => connection.abort();
    this.signal.addEventListener("abort", stop, { once: true });
    try {
      const response = await this.context.gateway.events(this.key, resumeAfter, connection.signal);
      this.handlers.onStreamState({ kind: "open", resumedAfter: resumeAfter });
      this.backoff.reset();
      // The id persists from one connection to the next, as in an EventSource.
      const parser = new EventStreamParser(resumeAfter);
      if (response.body) await this.read(response.body, parser, connection);
      return parser.lastEventId || undefined;
    } finally {
      this.signal.removeEventListener("abort", stop);
      connection.abort();
    }
  }

  /** Hands each event of `body` on; throws `StreamBroken` when the stream breaks or falls silent. */
  private async read(body: ReadableStream<Uint8Array>, parser: EventStreamParser, connection: AbortController): Promise<void> {
    // A connection that died without a word (a cable, a frozen proxy) is
    // noticed by its silence: the gateway sends a comment at least every 15 s.
    let silent = false;
    let watchdog: ReturnType<typeof setTimeout> | undefined;
    const rearm = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => {
        silent = true;
        connection.abort();
      }, SILENCE_MS);
    };
    rearm();
    const events = readEvents(body, { parser, onChunk: rearm });
    try {
      for (;;) {
        let next: IteratorResult<ServerSentEvent>;
        try {
          next = await events.next();
        } catch {
          const why = silent ? `nothing came for ${SILENCE_MS / 1000} s` : "the connection broke";
          throw new StreamBroken(why, parser.lastEventId || undefined);
        }
        if (next.done) return;
        const event = lockEvent(next.value);
        if (event) this.handlers.onEvent(event);
      }
    } finally {
      clearTimeout(watchdog);
      await events.return();
    }
  }
}

/** The lock's event a Server-Sent Event carries, if it is one. */
function lockEvent(event: ServerSentEvent): LockEvent | undefined {
  if (!NAMES.has(event.event)) return undefined;
  // A gap has no id of its own: the one it carries is the last event's.
  const id = event.event === "gap" ? undefined : event.lastEventId || undefined;
  return { name: event.event, id, data: parseGatewayJson(event.data) } as LockEvent;
}
