/**
 * Running a routine while something is held (a lock, a set of locks, a
 * session) and giving it back afterwards, whatever happens: what
 * `gateway.using`, `gateway.usingAll`, `gateway.session` and
 * `session.using` share.
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

/** What runs while something is held. */
export type Routine<H, T> = (held: H) => Promise<T> | T;

/**
 * What `using`, `usingAll` and `session` do with their `(options,
 * routine)` or `(routine)`: take the hold with the options, run the
 * routine under it and give it back, as `runHolding` says.
 */
export async function holding<O extends object, H extends Held, T>(
  optionsOrRoutine: O | Routine<H, T>,
  maybeRoutine: Routine<H, T> | undefined,
  how: {
    /** The call, for the error of a missing routine. */
    what: string;
    take: (options: O) => Promise<H>;
    giveBack: (held: H) => Promise<void>;
    report: (error: unknown) => void;
  },
): Promise<T> {
  const [options, routine] =
    typeof optionsOrRoutine === "function" ? [{} as O, optionsOrRoutine] : [optionsOrRoutine, maybeRoutine];
  if (typeof routine !== "function") throw new TypeError(`${how.what}: routine must be a function`);
  const held = await how.take(options);
  return runHolding(held, () => how.giveBack(held), routine, how.report);
}
