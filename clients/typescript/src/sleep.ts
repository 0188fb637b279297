/**
 * Waiting between retries: a cancellable sleep and the backoff schedule the
 * retrying calls share.
 */

/** Resolves after `ms`; rejects with the signal's reason if it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * The pause before retry number `attempt` (0 for the first): doubling from
 * `baseMs` up to `maxMs`, with jitter so that many clients cut off together
 * do not come back together; a gateway's `Retry-After` wins when it is given.
 */
export function backoffMs(attempt: number, retryAfterMs?: number, baseMs = 100, maxMs = 5_000): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, maxMs);
  const ceiling = Math.min(baseMs * 2 ** attempt, maxMs);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}
