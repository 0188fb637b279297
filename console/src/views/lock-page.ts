/**
 * One lock's page: its holders and waiters, its events as a timeline, live
 * from `GET /locks/{key}/events`, and revocation for an admin.
 *
 * The events say who took and who left the lock; the queue of waiters is
 * not an event, so while the lock is held the page also reads `GET
 * /locks/{key}` once a second. It does not read it while the lock is free
 * (the answer would be a 404, which the browser reports in its console as
 * a failed request): the next `acquired` event says when to look again.
 */

import type { Context, View } from "../context";
import { h, icon, ICONS, replaceChildren, setText } from "../dom";
import * as format from "../format";
import { type FreeLock, type HeldLock, type Lease, type Problem, Refusal, type Waiter } from "../gateway";
import { followLockEvents, type LockEvent, type StreamState } from "../lock-events";
import { poll, Waker } from "../poll";
import { leaseItem, modeLabel, problemNotice, runCountdowns, waiterList } from "./leases";
import { listRoute } from "./lock-list";

const EVERY_MS = 1000;
/** Timeline entries kept on the page. */
const TIMELINE_LENGTH = 200;
/** A lease this close to its end may be gone by the time a read arrives. */
const LEASE_MARGIN_MS = 300;

interface LockState {
  held: boolean;
  mode: string | undefined;
  limit: number | undefined;
  leases: Lease[];
  waiters: Waiter[];
}

export function lockPageView(key: string): View {
  return (root, context, signal) => {
    let state: LockState = { held: false, mode: undefined, limit: undefined, leases: [], waiters: [] };
    let known = false;

    const stateLine = h("p", { class: "lock-state", role: "status" }, "Reading the lock…");
    const holders = h("ul", { class: "leases", "aria-label": `Holders of ${key}` });
    const waiters = h("div", {});
    const problem = h("div", {});
    const streamLine = h("p", { class: "stream-state", role: "status" }, "Opening the event stream…");
    const timeline = h("ol", { class: "timeline", "aria-label": `Events of ${key}, newest first` });
    const revocation = revocationSection(key, context, signal);

    replaceChildren(
      root,
      h("p", { class: "back" }, h("a", { href: listRoute("") }, icon(ICONS.back), "All locks")),
      h("h1", { tabindex: "-1", class: "lock-key" }, key),
      stateLine,
      problem,
      h(
        "div",
        { class: "lock-columns" },
        h(
          "div",
          {},
          h("section", { "aria-labelledby": "holders-title" }, h("h2", { id: "holders-title" }, "Holders"), holders),
          h("section", { "aria-labelledby": "waiters-title" }, h("h2", { id: "waiters-title" }, "Waiters"), waiters),
          revocation,
        ),
        h(
          "section",
          { "aria-labelledby": "events-title" },
          h("h2", { id: "events-title" }, "Events"),
          streamLine,
          timeline,
        ),
      ),
    );

    const render = () => {
      const what = state.held
        ? `Held, ${modeLabel(state.mode ?? "exclusive", state.limit)}: ${format.plural(state.leases.length, "holder")}, ${state.waiters.length === 0 ? "nobody waiting" : `${format.count(state.waiters.length)} waiting`}.`
        : "Free: nobody holds it.";
      setText(stateLine, known ? what : "Reading the lock…");
      replaceChildren(holders, ...state.leases.map((lease) => leaseItem(lease, context.clock)));
      if (state.leases.length === 0) holders.append(h("li", { class: "muted" }, "Nobody holds it."));
      replaceChildren(
        waiters,
        state.waiters.length > 0 ? waiterList(state.waiters, context.clock) : h("p", { class: "muted" }, "Nobody waits."),
      );
    };

    const fromAnswer = (lock: HeldLock | FreeLock) => {
      known = true;
      if (lock.held) {
        context.clock.observeLock(lock);
        state = {
          held: true,
          mode: lock.mode,
          limit: lock.limit,
          leases: lock.leases ?? [],
          waiters: lock.waiters ?? [],
        };
      } else {
        state = { held: false, mode: undefined, limit: undefined, leases: [], waiters: lock.waiters ?? [] };
      }
      render();
    };

    const reader = new Waker();
    // Counts the events applied: a read sent before an event and answered
    // after it describes the lock as it was, and is dropped.
    let eventsApplied = 0;
    const onEvent = (event: LockEvent) => {
      eventsApplied += 1;
      addToTimeline(timeline, event, context);
      applyEvent(event);
      render();
    };
    const applyEvent = (event: LockEvent) => {
      const fence = event.data.fencing_token as string | undefined;
      switch (event.name) {
        case "snapshot":
          fromAnswer(event.data as unknown as HeldLock | FreeLock);
          return;
        case "acquired": {
          const data = event.data as { value: string | null; mode: string; expires_at_ms: number };
          const acquiredAt = eventTime(event) ?? context.clock.now();
          state.held = true;
          state.mode = data.mode === "counted" ? "exclusive" : data.mode;
          state.leases = [
            ...state.leases.filter((lease) => lease.fencing_token !== fence),
            { fencing_token: fence ?? "?", value: data.value, holds: 1, acquired_at_ms: acquiredAt, expires_at_ms: data.expires_at_ms },
          ];
          // The queue moved: read it now rather than at the next tick.
          reader.wake();
          return;
        }
        case "value":
          state.leases = state.leases.map((lease) =>
            lease.fencing_token === fence ? { ...lease, value: event.data.value as string | null } : lease,
          );
          return;
        case "released":
        case "expired":
        case "revoked":
          state.leases = state.leases.filter((lease) => lease.fencing_token !== fence);
          if (state.leases.length === 0) state.held = false;
          reader.wake();
          return;
      }
    };

    const onStreamState = (stream: StreamState) => {
      switch (stream.kind) {
        case "opening":
          setText(streamLine, "Opening the event stream…");
          return;
        case "open":
          setText(streamLine, "Following live.");
          if (stream.resumedAfter) addNote(timeline, `Stream resumed after event ${stream.resumedAfter}.`, context);
          return;
        case "broken":
          setText(streamLine, `The event stream broke (${stream.reason}); reconnecting in ${format.duration(stream.retryInMs)}…`);
          addNote(timeline, `Stream broke: ${stream.reason}.`, context);
          return;
        case "refused":
          setText(streamLine, `The event stream was refused: ${stream.problem.status} ${stream.problem.title}.`);
          return;
      }
    };

    runCountdowns(holders, context.clock, signal);
    void followLockEvents(key, context, signal, { onEvent, onStreamState });
    void poll(
      async (tickSignal) => {
        if (!worthReading(state, context.clock.now())) return;
        const before = eventsApplied;
        let answer: HeldLock | FreeLock;
        try {
          answer = (await context.gateway.lock(key, tickSignal)).body;
        } catch (error) {
          // Released between the last event and this read: the event is on its way.
          if (!(error instanceof Refusal && error.problem.status === 404)) throw error;
          answer = { key, held: false };
        }
        if (before === eventsApplied) fromAnswer(answer);
        else reader.wake();
      },
      {
        everyMs: EVERY_MS,
        signal,
        token: context.token,
        waker: reader,
        onProblem: (refusal: Problem | null) => replaceChildren(problem, refusal ? problemNotice(refusal) : null),
      },
    );
  };
}

/** Whether `GET /locks/{key}` would find the lock held: some lease has time left (or none is known). */
function worthReading(state: LockState, now: number): boolean {
  if (!state.held) return false;
  return state.leases.length === 0 || state.leases.some((lease) => lease.expires_at_ms - now > LEASE_MARGIN_MS);
}

/** The Redis time of an event, from its id (`<ms>-<seq>`). */
function eventTime(event: LockEvent): number | undefined {
  const ms = Number(event.id?.split("-")[0]);
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

function addToTimeline(timeline: HTMLOListElement, event: LockEvent, context: Context): void {
  const at = eventTime(event) ?? context.clock.now();
  const entry = h(
    "li",
    { class: `event event-${event.name}`, "data-event": event.name },
    h("time", { datetime: new Date(at).toISOString() }, format.clockTime(at)),
    h("span", { class: "event-name" }, event.name),
    h("span", { class: "event-text" }, describe(event)),
  );
  prepend(timeline, entry);
}

function addNote(timeline: HTMLOListElement, text: string, context: Context): void {
  const at = context.clock.now();
  prepend(
    timeline,
    h(
      "li",
      { class: "event event-note" },
      h("time", { datetime: new Date(at).toISOString() }, format.clockTime(at)),
      h("span", { class: "event-name" }, "note"),
      h("span", { class: "event-text" }, text),
    ),
  );
}

function prepend(timeline: HTMLOListElement, entry: HTMLLIElement): void {
  timeline.prepend(entry);
  while (timeline.children.length > TIMELINE_LENGTH) timeline.lastElementChild?.remove();
}

/** One sentence per event. */
function describe(event: LockEvent): string {
  const data = event.data;
  const fence = `#${String(data.fencing_token ?? "?")}`;
  const value = typeof data.value === "string" ? ` (“${data.value}”)` : "";
  switch (event.name) {
    case "snapshot": {
      if (!data.held) return `Free, ${waitingText(data.waiters)}.`;
      const leases = (data.leases as Lease[] | undefined) ?? [];
      const held = leases.map((lease) => `#${lease.fencing_token}`).join(", ");
      return `Held (${String(data.mode)}) by ${held || format.plural(Number(data.holders), "holder")}, ${waitingText(data.waiters)}.`;
    }
    case "acquired":
      return `${fence}${value} took it, ${String(data.mode)}, lease until ${format.clockTime(Number(data.expires_at_ms))}.`;
    case "value":
      return `${fence} now shows “${String(data.value ?? "")}”.`;
    case "released":
      return `${fence} released it.`;
    case "expired":
      return `${fence}'s lease ran out.`;
    case "revoked":
      return `${fence} was revoked by an admin.`;
    case "gap":
      return "Some events were no longer kept; a fresh snapshot follows.";
    default:
      return JSON.stringify(data);
  }
}

function waitingText(waiters: unknown): string {
  const n = Array.isArray(waiters) ? waiters.length : 0;
  return n === 0 ? "nobody waiting" : `${format.count(n)} waiting`;
}

/**
 * Revocation (`DELETE /locks/{key}?force=true`, admin token): a button, a
 * confirmation that says what it does to the holders, and the outcome.
 */
function revocationSection(key: string, context: Context, signal: AbortSignal): HTMLElement {
  const outcome = h("div", { role: "status", class: "outcome" });
  const hint = h("p", { class: "hint", id: "revoke-hint" });
  const open = h(
    "button",
    { type: "button", class: "danger", "aria-describedby": "revoke-hint" },
    "Revoke every hold…",
  );
  const confirm = h(
    "button",
    { type: "submit", value: "revoke", class: "danger" },
    "Revoke",
  );
  const dialog = h(
    "dialog",
    { "aria-labelledby": "revoke-title", "aria-describedby": "revoke-what" },
    h(
      "form",
      { method: "dialog" },
      h("h2", { id: "revoke-title" }, icon(ICONS.alert), `Revoke ${key}?`),
      h(
        "p",
        { id: "revoke-what" },
        "Every holder loses the lock at once: a streamed holder is told it was lost (revoked), ",
        h("code", {}, "lockgate run"),
        " stops its command, watchers see ",
        h("code", {}, "revoked"),
        ", and the next grant gets a larger fencing token, so resources that check fencing tokens refuse the old holders' writes.",
      ),
      h(
        "div",
        { class: "actions" },
        h("button", { type: "submit", value: "cancel", autofocus: true }, "Cancel"),
        confirm,
      ),
    ),
  );

  const showAccess = () => {
    const hasToken = context.token.value !== null;
    open.disabled = !hasToken;
    setText(hint, hasToken ? "Ends every hold of this lock now. Needs the admin token." : "Enter the admin token at the top of the page to revoke.");
  };
  showAccess();
  const stopWatching = context.token.onChange(showAccess);
  signal.addEventListener("abort", () => {
    stopWatching();
    if (dialog.open) dialog.close();
  });

  open.addEventListener("click", () => {
    dialog.returnValue = "";
    dialog.showModal();
  });
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "revoke") {
      open.focus();
      return;
    }
    open.disabled = true;
    replaceChildren(outcome, h("p", {}, "Revoking…"));
    try {
      const answer = await context.gateway.revoke(key, signal);
      replaceChildren(outcome, h("p", { class: "notice ok" }, answer.status === 204 ? `Revoked at ${format.clockTime(Date.now())}.` : "Revoked."));
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof Refusal && error.problem.status === 404) {
        replaceChildren(outcome, h("p", { class: "notice" }, "Nobody held it: nothing to revoke."));
      } else if (error instanceof Refusal) {
        replaceChildren(outcome, problemNotice(error.problem));
      } else {
        replaceChildren(outcome, h("p", { class: "notice problem" }, `Not revoked: ${(error as Error).message}.`));
      }
    } finally {
      showAccess();
      open.focus();
    }
  });

  return h(
    "section",
    { "aria-labelledby": "revoke-section-title", class: "revocation" },
    h("h2", { id: "revoke-section-title" }, "Revocation"),
    open,
    hint,
    outcome,
    dialog,
  );
}
