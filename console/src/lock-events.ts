/**
 * Following one lock's events (`GET /locks/{key}/events`) for as long as
 * its page is open.
 *
 * The stream is read with `fetch` (so it can carry the token) and parsed
 * by `EventStreamParser`. When it breaks (the gateway restarted, a proxy
 * cut it, nothing arrived for longer than the keep-alive allows) it is
 * opened again after a back-off with `Last-Event-ID`, so the events missed
 * meanwhile arrive once each, through whichever instance answers.
 */

import type { Context } from "./context";
import { GatewayUnreachable, type Problem, Refusal } from "./gateway";
import { parseExact } from "./json";
import { Backoff, sleep } from "./link";
import { EventStreamParser } from "./sse";

/** Longer than the gateway's keep-alive (15 s by default) with room to spare. */
const SILENCE_MS = 50_000;

export interface LockEvent {
  /** `snapshot`, `acquired`, `value`, `released`, `expired`, `revoked` or `gap`. */
  name: string;
  /** The event's JSON data (fencing tokens as strings). */
  data: Record<string, unknown>;
  /** The event's id, when it has one (`gap` has none). */
  id: string | undefined;
}

export type StreamState =
  | { kind: "opening" }
  | { kind: "open"; resumedAfter: string | undefined }
  | { kind: "broken"; reason: string; retryInMs: number }
  | { kind: "refused"; problem: Problem };

export interface LockEventHandlers {
  onEvent(event: LockEvent): void;
  onStreamState(state: StreamState): void;
}

export async function followLockEvents(
  key: string,
  context: Context,
  signal: AbortSignal,
  handlers: LockEventHandlers,
): Promise<void> {
  const backoff = new Backoff();
  let lastEventId: string | undefined;
  while (!signal.aborted) {
    handlers.onStreamState({ kind: "opening" });
    let reason: string;
    try {
      const resumedAfter = lastEventId;
      const response = await context.gateway.events(key, lastEventId, signal);
      handlers.onStreamState({ kind: "open", resumedAfter });
      backoff.reset();
      lastEventId = await readEvents(response, lastEventId, signal, handlers);
      if (signal.aborted) return;
      reason = "the gateway ended the stream";
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof Refusal && error.isAccessDenied) {
        handlers.onStreamState({ kind: "refused", problem: error.problem });
        await context.token.changed(signal);
        continue;
      }
      if (error instanceof Refusal) {
        handlers.onStreamState({ kind: "refused", problem: error.problem });
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
    const retryInMs = backoff.next();
    handlers.onStreamState({ kind: "broken", reason, retryInMs });
    await sleep(retryInMs, signal);
  }
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

/** Reads events until the stream ends; returns the id to resume after. */
async function readEvents(
  response: Response,
  resumeFrom: string | undefined,
  signal: AbortSignal,
  handlers: LockEventHandlers,
): Promise<string | undefined> {
  const parser = new EventStreamParser(resumeFrom);
  const body = response.body;
  if (!body) return resumeFrom;
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  // A connection that died without a word (a cable, a frozen proxy) is
  // noticed by its silence: the gateway sends a comment at least every 15 s.
  let silent = false;
  let watchdog: ReturnType<typeof setTimeout> | undefined;
  const rearm = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => {
      silent = true;
      void reader.cancel();
    }, SILENCE_MS);
  };
  const stop = () => void reader.cancel();
  signal.addEventListener("abort", stop, { once: true });
  rearm();
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<string>;
      try {
        chunk = await reader.read();
      } catch {
        throw new StreamBroken("the connection broke", parser.lastEventId);
      }
      if (chunk.done) break;
      rearm();
      for (const event of parser.feed(chunk.value)) {
        handlers.onEvent({
          name: event.event,
          data: parseExact<Record<string, unknown>>(event.data),
          id: event.event === "gap" ? undefined : event.lastEventId,
        });
      }
    }
  } finally {
    clearTimeout(watchdog);
    signal.removeEventListener("abort", stop);
  }
  if (silent) throw new StreamBroken(`nothing came for ${SILENCE_MS / 1000} s`, parser.lastEventId);
  return parser.lastEventId;
}
