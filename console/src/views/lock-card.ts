/**
 * One lock of the list: its key as a link to its page, its mode, holders
 * and waiters. The link stays the same element from answer to answer (so
 * keyboard focus stays on it); the rest is redrawn only when what it shows
 * changed.
 */

import { h, replaceChildren } from "../dom";
import * as format from "../format";
import type { HeldLock } from "../gateway";
import type { ServerClock } from "../server-clock";
import { leaseItem, waiterList } from "./leases";
import { lockRoute } from "./routes";

export class LockCard {
  readonly element: HTMLLIElement;
  private readonly details: HTMLDivElement;
  private shown = "";

  constructor(key: string) {
    const link = h("a", { href: lockRoute(key), class: "key" }, key);
    this.details = h("div", { class: "lock-details" });
    this.element = h("li", { class: "lock-card", "data-key": key }, h("h2", {}, link), this.details);
  }

  update(lock: HeldLock, clock: ServerClock): void {
    const leases = lock.leases ?? [];
    const waiters = lock.waiters ?? [];
    // Waiting times grow by themselves; redraw them at most once a second.
    const fingerprint = JSON.stringify(
      [lock.mode, lock.limit, leases, waiters.map((w) => [w.position, w.mode]), Math.floor(Date.now() / 1000)],
      (_, value: unknown) => (typeof value === "bigint" ? String(value) : value),
    );
    if (fingerprint === this.shown) return;
    this.shown = fingerprint;
    replaceChildren(
      this.details,
      h(
        "p",
        { class: "facts" },
        h("span", { class: "chip" }, format.modeLabel(lock.mode, lock.limit)),
        h("span", {}, format.plural(lock.holders, "holder")),
        placesTaken(lock),
        h("span", {}, waiters.length === 0 ? "nobody waiting" : `${format.count(waiters.length)} waiting`),
      ),
      h("ul", { class: "leases", "aria-label": `Holders of ${lock.key}` }, ...leases.map((lease) => leaseItem(lease, clock))),
      waiters.length > 0 ? waiterList(waiters, clock) : null,
    );
  }
}

/** For a counting lock whose holders take permits: how many of its places are taken. */
function placesTaken(lock: HeldLock): HTMLSpanElement | null {
  const leases = lock.leases ?? [];
  if (!lock.limit || lock.limit <= 1 || !leases.some((lease) => lease.permits != null)) return null;
  const taken = leases.reduce((sum, lease) => sum + (lease.permits ?? 1), 0);
  return h("span", { class: "places" }, `${taken} of ${lock.limit} places taken`);
}
