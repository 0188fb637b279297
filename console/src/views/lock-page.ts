/**
 * One lock's page: its holders and waiters, its events as a timeline, live
 * from `GET /locks/{key}/events`, and revocation for an admin.
 *
 * The view ties the parts together: what is known of the lock
 * (`lock-state.ts`) changes with what the feed hears (`lock-feed.ts`) and
 * shows in the page (`lock-page-layout.ts`, `lock-timeline.ts`).
 */

import type { View } from "../context";
import { runCountdowns } from "./leases";
import { followLock } from "./lock-feed";
import { lockPageLayout, showLock, showProblem, showStreamState } from "./lock-page-layout";
import { applyEvent, fromAnswer, isDelayed, type LockState, UNKNOWN_LOCK, worthReading } from "./lock-state";
import { addEvent } from "./lock-timeline";
import { Revocation } from "./revocation";

export function lockPageView(key: string): View {
  return (root, context, signal) => {
    const { clock } = context;
    const page = lockPageLayout(root, key, new Revocation(key, context, signal));
    let state = UNKNOWN_LOCK;
    // A lock-delay ends without an event: the page shows the lock again then.
    let delayOver: ReturnType<typeof setTimeout> | undefined;
    signal.addEventListener("abort", () => clearTimeout(delayOver), { once: true });
    const show = (next: LockState) => {
      state = next;
      showLock(page, state, clock);
      clearTimeout(delayOver);
      const now = clock.now();
      if (isDelayed(state, now) && state.delayedUntilMs !== undefined) {
        delayOver = setTimeout(() => show(state), state.delayedUntilMs - now + 50);
      }
    };
    runCountdowns(root, clock, signal);
    followLock(key, context, signal, {
      onEvent: (event) => {
        addEvent(page.timeline, event, clock);
        if (event.name === "snapshot" && event.data.held) clock.observeLock(event.data);
        show(applyEvent(state, event, clock.now()));
      },
      onAnswer: (lock) => {
        if (lock.held) clock.observeLock(lock);
        show(fromAnswer(lock));
      },
      onStreamState: (stream) => showStreamState(page, stream, clock),
      onProblem: (problem) => showProblem(page, problem),
      worthReading: () => worthReading(state, clock.now()),
    });
  };
}
