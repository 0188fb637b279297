/**
 * Holders and waiters, as both the list of locks and a lock's own page show
 * them, and the countdowns that keep every lease's time left (and a
 * lock-delay's) current between answers.
 */

import { h, replaceChildren, setText } from "../dom";
import * as format from "../format";
import type { Lease, Problem, Waiter } from "../gateway";
import type { ServerClock } from "../server-clock";

/** One holder: fencing token, value, holds and a lease bar that counts down. */
export function leaseItem(lease: Lease, clock: ServerClock): HTMLLIElement {
  return new LeaseRow(lease, clock).element;
}

/**
 * One holder's row, updated in place from answer to answer: the same
 * element for the same hold (its fencing token), so that a control in it
 * (`action`) keeps the keyboard focus through the re-reads.
 */
export class LeaseRow {
  readonly element: HTMLLIElement;
  private readonly value = h("span", { class: "value" });
  private readonly holds = h("span", { class: "holds" });
  private readonly permits = h("span", { class: "permits" });
  private readonly left: HTMLSpanElement;
  private shownValue: string | null | undefined;

  constructor(lease: Lease, clock: ServerClock, action?: HTMLElement) {
    this.left = h(
      "span",
      { class: "left" },
      h("span", { class: "bar", "aria-hidden": "true" }, h("span", { class: "fill" })),
      h("span", { class: "left-text" }, ""),
    );
    // A session's handle stays with its hold: it is drawn once.
    const session = lease.session
      ? h("span", { class: "session" }, h("span", { class: "label" }, "session "), h("code", { class: "handle" }, lease.session))
      : null;
    this.element = h(
      "li",
      { class: "lease", "data-fencing-token": String(lease.fencing_token) },
      h("span", { class: "fence" }, h("span", { class: "label" }, "fencing token "), h("span", { class: "token" }, String(lease.fencing_token))),
      this.value,
      session,
      this.permits,
      this.holds,
      this.left,
      action,
    );
    this.update(lease, clock);
  }

  /** Shows `lease` (the same hold, as a newer answer describes it). */
  update(lease: Lease, clock: ServerClock): void {
    if (lease.value !== this.shownValue) {
      this.shownValue = lease.value;
      this.value.classList.toggle("muted", lease.value === null);
      if (lease.value === null) replaceChildren(this.value, "no value");
      else replaceChildren(this.value, h("span", { class: "visually-hidden" }, "value "), lease.value);
    }
    // A counting lock's holder may take several of its places at once.
    const permits = lease.permits ?? 0;
    this.permits.hidden = permits < 1;
    setText(this.permits, permits >= 1 ? format.plural(permits, "permit") : "");
    this.holds.hidden = lease.holds <= 1;
    setText(this.holds, lease.holds > 1 ? format.plural(lease.holds, "hold") : "");
    this.left.dataset.expiresAt = String(lease.expires_at_ms);
    this.left.dataset.leaseMs = String(Math.max(1, lease.expires_at_ms - lease.acquired_at_ms));
    showTimeLeft(this.element, clock.now());
  }
}

/** The waiters in the order they will be served. */
export function waiterList(waiters: Waiter[], clock: ServerClock): HTMLOListElement {
  return h(
    "ol",
    { class: "waiters" },
    ...waiters.map((waiter) =>
      h(
        "li",
        { class: "waiter", "data-position": waiter.position },
        h("span", { class: "position" }, `${waiter.position}.`),
        h("span", { class: "mode" }, waiter.mode),
        h("span", { class: "muted" }, `waiting ${format.age(clock.now() - waiter.waiting_since_ms)}`),
      ),
    ),
  );
}

/** Updates every lease and lock-delay under `root` to the time left now, as often as `everyMs`, until `signal` aborts. */
export function runCountdowns(root: HTMLElement, clock: ServerClock, signal: AbortSignal, everyMs = 100): void {
  const timer = setInterval(() => showTimeLeft(root, clock.now()), everyMs);
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}

/** Sets every lease bar and lock-delay under `root` to the time left at `now` (Redis clock). */
export function showTimeLeft(root: HTMLElement, now: number): void {
  for (const delay of root.querySelectorAll<HTMLElement>("[data-delayed-until]")) {
    const remaining = Number(delay.dataset.delayedUntil) - now;
    setText(delay, remaining > 0 ? `${format.duration(remaining)} left` : "over");
  }
  for (const left of root.querySelectorAll<HTMLElement>("[data-expires-at]")) {
    const remaining = Number(left.dataset.expiresAt) - now;
    const fraction = Math.min(1, Math.max(0, remaining / Number(left.dataset.leaseMs)));
    const label = remaining > 0 ? `${format.duration(remaining)} left` : "lease over";
    const text = left.querySelector(".left-text");
    const fill = left.querySelector<HTMLElement>(".fill");
    if (text && text.textContent !== label) text.textContent = label;
    if (fill) fill.style.width = `${(fraction * 100).toFixed(1)}%`;
  }
}

/** A refusal as the page shows it: what was refused, and what to do. */
export function problemNotice(problem: Problem): HTMLElement {
  const advice =
    problem.status === 401
      ? "Enter the admin token at the top of the page."
      : problem.status === 403
        ? "The token given is not accepted here: check the admin token at the top of the page."
        : null;
  return h(
    "div",
    { class: "notice problem", role: "alert" },
    h("p", {}, h("strong", {}, `${problem.status} ${problem.title}`), problem.detail ? `: ${problem.detail}` : ""),
    advice ? h("p", {}, advice) : null,
  );
}
