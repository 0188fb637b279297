/**
 * Whether the page can reach the gateway, as every request finds out.
 *
 * A request that gets no answer (connection refused, reset, timed out, or a
 * proxy's own 502/503/504 page because no instance answers) means the
 * gateway is lost; any answer from the gateway itself means it is back. A
 * `503 backend-unavailable` is an answer, but one that says Redis is out of
 * reach. The header shows the state; the pollers and the event stream retry
 * with `Backoff` until an answer comes.
 */

export type LinkState =
  | { kind: "connecting" }
  | { kind: "live"; instance: string | null }
  | { kind: "lost"; reason: string; since: number; lastTry: number }
  | { kind: "backend-down"; detail: string; since: number };

type Listener = (state: LinkState) => void;

export class Link {
  private current: LinkState = { kind: "connecting" };
  private listeners = new Set<Listener>();

  get state(): LinkState {
    return this.current;
  }

  onChange(listener: Listener): () => void {
    this.listeners.add(listener);
    listener(this.current);
    return () => this.listeners.delete(listener);
  }

  /** The gateway answered (`X-Instance-Id` names the instance that did). */
  answered(instance: string | null): void {
    const was = this.current;
    if (was.kind === "live" && was.instance === instance) return;
    this.set({ kind: "live", instance });
  }

  /** No answer came. */
  unreachable(reason: string): void {
    const now = Date.now();
    const was = this.current;
    const since = was.kind === "lost" ? was.since : now;
    this.set({ kind: "lost", reason, since, lastTry: now });
  }

  /** The gateway answered that it cannot reach Redis. */
  backendDown(detail: string): void {
    const was = this.current;
    if (was.kind === "backend-down" && was.detail === detail) return;
    this.set({ kind: "backend-down", detail, since: was.kind === "backend-down" ? was.since : Date.now() });
  }

  private set(state: LinkState): void {
    this.current = state;
    for (const listener of this.listeners) listener(state);
  }
}

/**
 * Delays between retries: doubling from `firstMs` up to `maxMs`, each drawn
 * from 80–120 % of its step so that many open consoles do not knock on a
 * restarted gateway in step.
 */
export class Backoff {
  private step = 0;

  constructor(
    private readonly firstMs = 500,
    private readonly maxMs = 5000,
  ) {}

  next(): number {
    const base = Math.min(this.maxMs, this.firstMs * 2 ** this.step);
    this.step = Math.min(this.step + 1, 16);
    return Math.round(base * (0.8 + Math.random() * 0.4));
  }

  reset(): void {
    this.step = 0;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
