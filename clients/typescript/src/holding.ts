/**
 * Running a routine while something is held (a lock, a session) and giving
 * it back afterwards, whatever happens: what `gateway.using`,
 * `gateway.session` and `session.using` share.
 */

/** What is held: it can be lost while the routine runs. */
export interface Held {
  readonly lost: boolean;
  /** Aborted, with the loss's error as its reason, once it is lost. */
  readonly signal: AbortSignal;
}

/**
 * Runs `routine(held)`, then `giveBack()`. Resolves with the routine's
 * result; rejects with the routine's own error if it threw (a failure to
 * give back then goes to `report`, never over it), with the loss's error if
 * `held` was lost while the routine ran (its result was made without it),
 * or with the failure to give back.
 */
export async function runHolding<H extends Held, T>(
  held: H,
  giveBack: () => Promise<void>,
  routine: (held: H) => Promise<T> | T,
  report: (error: unknown) => void,
): Promise<T> {
  let result: T;
  try {
    result = await routine(held);
  } catch (error) {
    try {
      await giveBack();
    } catch (giveBackError) {
      report(giveBackError);
    }
    throw error;
  }
  if (held.lost) {
    // Nothing to give back, but the stream is closed all the same.
    await giveBack().catch(() => {});
    throw held.signal.reason;
  }
  await giveBack();
  return result;
}

/** The `(options, routine)` or `(routine)` arguments of `using` and `session`. */
export function routineArguments<O extends object, R extends (held: never) => unknown>(
  optionsOrRoutine: O | R,
  maybeRoutine: R | undefined,
  what: string,
): [O, R] {
  const [options, routine] =
    typeof optionsOrRoutine === "function" ? [{} as O, optionsOrRoutine as R] : [optionsOrRoutine as O, maybeRoutine];
  if (typeof routine !== "function") throw new TypeError(`${what}: routine must be a function`);
  return [options, routine];
}
