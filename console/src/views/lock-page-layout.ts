/**
 * The DOM of one lock's page: its parts, and how a state of the lock, of
 * its event stream or a refusal shows in them.
 */

import { h, icon, ICONS, replaceChildren, setText } from "../dom";
import * as format from "../format";
import type { Problem } from "../gateway";
import type { StreamState } from "../lock-events";
import type { ServerClock } from "../server-clock";
import { leaseItem, problemNotice, waiterList } from "./leases";
import { type LockState, summary } from "./lock-state";
import { addNote, timelineList } from "./lock-timeline";
import { listRoute } from "./routes";

/** The parts of the page that change. */
export interface LockPageParts {
  stateLine: HTMLParagraphElement;
  holders: HTMLUListElement;
  waiters: HTMLDivElement;
  problem: HTMLDivElement;
  streamLine: HTMLParagraphElement;
  timeline: HTMLOListElement;
}

/** Draws the page of `key` into `root`, with `revocation` under its waiters. */
export function lockPageLayout(root: HTMLElement, key: string, revocation: HTMLElement): LockPageParts {
  const parts: LockPageParts = {
    stateLine: h("p", { class: "lock-state", role: "status" }, "Reading the lock…"),
    holders: h("ul", { class: "leases", "aria-label": `Holders of ${key}` }),
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
    parts.problem,
    h(
      "div",
      { class: "lock-columns" },
      h("div", {}, section("holders-title", "Holders", parts.holders), section("waiters-title", "Waiters", parts.waiters), revocation),
      section("events-title", "Events", parts.streamLine, parts.timeline),
    ),
  );
  return parts;
}

/** Shows what is known of the lock: a sentence, its holders and its waiters. */
export function showLock(parts: LockPageParts, state: LockState, clock: ServerClock): void {
  setText(parts.stateLine, summary(state));
  replaceChildren(parts.holders, ...state.leases.map((lease) => leaseItem(lease, clock)));
  if (state.leases.length === 0) parts.holders.append(h("li", { class: "muted" }, "Nobody holds it."));
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
