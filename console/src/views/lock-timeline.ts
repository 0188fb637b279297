/**
 * A lock's events as a timeline, newest first: one entry per event with a
 * sentence saying what happened, and notes on the stream itself (broken,
 * resumed).
 */

import { h } from "../dom";
import * as format from "../format";
import type { Lease } from "../gateway";
import type { LockEvent } from "../lock-events";
import type { ServerClock } from "../server-clock";
import { eventTime } from "./lock-state";

/** Timeline entries kept on the page. */
const TIMELINE_LENGTH = 200;

/** The timeline's list, empty. */
export function timelineList(key: string): HTMLOListElement {
  return h("ol", { class: "timeline", "aria-label": `Events of ${key}, newest first` });
}

/** Adds `event` at the top of `timeline`, at its own time when its id tells it. */
export function addEvent(timeline: HTMLOListElement, event: LockEvent, clock: ServerClock): void {
  prepend(timeline, entry(eventTime(event) ?? clock.now(), event.name, describeEvent(event), `event event-${event.name}`, event.name));
}

/** Adds a note about the stream (not an event of the lock) at the top of `timeline`. */
export function addNote(timeline: HTMLOListElement, text: string, clock: ServerClock): void {
  prepend(timeline, entry(clock.now(), "note", text, "event event-note"));
}

function entry(at: number, name: string, text: string, className: string, eventName?: string): HTMLLIElement {
  return h(
    "li",
    { class: className, "data-event": eventName },
    h("time", { datetime: new Date(at).toISOString() }, format.clockTime(at)),
    h("span", { class: "event-name" }, name),
    h("span", { class: "event-text" }, text),
  );
}

function prepend(timeline: HTMLOListElement, item: HTMLLIElement): void {
  timeline.prepend(item);
  while (timeline.children.length > TIMELINE_LENGTH) timeline.lastElementChild?.remove();
}

/** One sentence per event. */
export function describeEvent(event: LockEvent): string {
  switch (event.name) {
    case "snapshot": {
      const lock = event.data;
      if (!lock.held) {
        const delay = lock.delayed_until_ms ? `delayed until ${format.clockTime(lock.delayed_until_ms)}, ` : "";
        return `Free, ${delay}${waitingText(lock.waiters)}.`;
      }
      const held = (lock.leases ?? []).map((lease: Lease) => `#${lease.fencing_token}`).join(", ");
      return `Held (${lock.mode}) by ${held || format.plural(lock.holders, "holder")}, ${waitingText(lock.waiters)}.`;
    }
    case "acquired": {
      const { fencing_token, value, mode, expires_at_ms } = event.data;
      return `#${fencing_token}${valueText(value)} took it, ${mode}, lease until ${format.clockTime(expires_at_ms)}.`;
    }
    case "value":
      return `#${event.data.fencing_token} now shows “${event.data.value ?? ""}”.`;
    case "released":
      return `#${event.data.fencing_token} released it.`;
    case "expired":
      return `#${event.data.fencing_token}'s lease ran out.`;
    case "revoked":
      return `#${event.data.fencing_token} was revoked by an admin.`;
    case "delayed":
      return `Nobody is granted it until ${format.clockTime(event.data.delayed_until_ms)}: the lock-delay of a session that held it.`;
    case "gap":
      return "Some events were no longer kept; a fresh snapshot follows.";
  }
}

function valueText(value: string | null): string {
  return typeof value === "string" ? ` (“${value}”)` : "";
}

function waitingText(waiters: unknown[] | undefined): string {
  const n = waiters?.length ?? 0;
  return n === 0 ? "nobody waiting" : `${format.count(n)} waiting`;
}
