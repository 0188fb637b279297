/**
 * The DOM of one lock's page: its parts, and how a state of the lock, of
 * its event stream or a refusal shows in them.
 */

import { h, icon, ICONS, reorderChildren, replaceChildren, setText } from "../dom";
import * as format from "../format";
import type { Problem } from "../gateway";
import type { StreamState } from "../lock-events";
import type { ServerClock } from "../server-clock";
import { LeaseRow, problemNotice, showTimeLeft, waiterList } from "./leases";
import { isDelayed, type LockState, summary } from "./lock-state";
import { addNote, timelineList } from "./lock-timeline";
import type { Revocation } from "./revocation";
import { listRoute } from "./routes";

/** The parts of the page that change. */
export interface LockPageParts {
  stateLine: HTMLParagraphElement;
  /** While a lock-delay is in force: until when, and a countdown. */
  delayLine: HTMLParagraphElement;
  delayUntil: HTMLTimeElement;
  delayLeft: HTMLSpanElement;
  holders: HTMLUListElement;
  /** Each holder's row, by fencing token, kept from answer to answer. */
  rows: Map<string, LeaseRow>;
  nobody: HTMLLIElement;
  revocation: Revocation;
  waiters: HTMLDivElement;
  problem: HTMLDivElement;
  streamLine: HTMLParagraphElement;
  timeline: HTMLOListElement;
}

/** Draws the page of `key` into `root`, with `revocation` under its waiters and a revoke button on each holder. */
export function lockPageLayout(root: HTMLElement, key: string, revocation: Revocation): LockPageParts {
  const delayUntil = h("time", {});
  const delayLeft = h("span", { class: "delay-left" });
  const parts: LockPageParts = {
    stateLine: h("p", { class: "lock-state", role: "status" }, "Reading the lock…"),
    delayLine: h(
      "p",
      { class: "notice delay", hidden: true },
      "A session that held it expired, and its lock-delay keeps the lock from anyone until ",
      delayUntil,
      " (",
      delayLeft,
      "), so that a holder still writing has time to notice.",
    ),
    delayUntil,
    delayLeft,
    holders: h("ul", { class: "leases", "aria-label": `Holders of ${key}` }),
    rows: new Map(),
    nobody: h("li", { class: "muted" }, "Nobody holds it."),
    revocation,
    waiters: h("div", {}),
    problem: h("div", {}),
    streamLine: h("p", { class: "stream-state", role: "status" }, "Opening the event stream…"),
    timeline: timelineList(key),
  };
  const section = (id: string, title: string, ...content: HTMLElement[]) =>
    h("section", { "aria-labelledby": id }, h("h2", { id }, title), ...content);
  replaceChildren(
    root,
    h("p", { class: "back" }, h("a", { href: listRoute("") }, icon(ICONS.back), "All locks")),
    h("h1", { tabindex: "-1", class: "lock-key" }, key),
    parts.stateLine,
    parts.delayLine,
    parts.problem,
    h(
      "div",
      { class: "lock-columns" },
      h("div", {}, section("holders-title", "Holders", parts.holders), section("waiters-title", "Waiters", parts.waiters), revocation.section),
      section("events-title", "Events", parts.streamLine, parts.timeline),
    ),
  );
  return parts;
}

/** Shows what is known of the lock: a sentence, a lock-delay, its holders and its waiters. */
export function showLock(parts: LockPageParts, state: LockState, clock: ServerClock): void {
  const now = clock.now();
  setText(parts.stateLine, summary(state, now));
  const delayed = isDelayed(state, now);
  parts.delayLine.hidden = !delayed;
  if (delayed && state.delayedUntilMs !== undefined) {
    parts.delayUntil.dateTime = new Date(state.delayedUntilMs).toISOString();
    setText(parts.delayUntil, format.clockTime(state.delayedUntilMs));
    parts.delayLeft.dataset.delayedUntil = String(state.delayedUntilMs);
    showTimeLeft(parts.delayLine, now);
  } else {
    delete parts.delayLeft.dataset.delayedUntil;
  }
  // The same row for the same hold, updated in place: its revoke button keeps the focus.
  const shown = new Set<string>();
  const rows = state.leases.map((lease) => {
    const token = String(lease.fencing_token);
    shown.add(token);
    let row = parts.rows.get(token);
    if (row) row.update(lease, clock);
    else {
      row = new LeaseRow(lease, clock, parts.revocation.button(lease));
      parts.rows.set(token, row);
    }
    return row.element;
  });
  for (const token of [...parts.rows.keys()]) if (!shown.has(token)) parts.rows.delete(token);
  reorderChildren(parts.holders, rows.length > 0 ? rows : [parts.nobody]);
  replaceChildren(
    parts.waiters,
    state.waiters.length > 0 ? waiterList(state.waiters, clock) : h("p", { class: "muted" }, "Nobody waits."),
  );
}

/** Shows the event stream's state, and notes its breaks and resumptions in the timeline. */
export function showStreamState(parts: LockPageParts, stream: StreamState, clock: ServerClock): void {
  switch (stream.kind) {
    case "opening":
      setText(parts.streamLine, "Opening the event stream…");
      return;
    case "open":
      setText(parts.streamLine, "Following live.");
      if (stream.resumedAfter) addNote(parts.timeline, `Stream resumed after event ${stream.resumedAfter}.`, clock);
      return;
    case "broken":
      setText(parts.streamLine, `The event stream broke (${stream.reason}); reconnecting in ${format.duration(stream.retryInMs)}…`);
      addNote(parts.timeline, `Stream broke: ${stream.reason}.`, clock);
      return;
    case "refused":
      setText(parts.streamLine, `The event stream was refused: ${stream.problem.status} ${stream.problem.title}.`);
      return;
  }
}

/** Shows a refusal of the page's reads, or clears it (`null`). */
export function showProblem(parts: LockPageParts, problem: Problem | null): void {
  replaceChildren(parts.problem, problem ? problemNotice(problem) : null);
}
