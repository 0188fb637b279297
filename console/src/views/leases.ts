/**
 * Holders and waiters, as both the list of locks and a lock's own page show
 * them, and the countdown that keeps every lease's time left current
 * between answers.
 */

import { h } from "../dom";
import * as format from "../format";
import type { Lease, Problem, Waiter } from "../gateway";
import type { ServerClock } from "../server-clock";

/** One holder: fencing token, value, holds and a lease bar that counts down. */
export function leaseItem(lease: Lease, clock: ServerClock): HTMLLIElement {
  const leaseMs = Math.max(1, lease.expires_at_ms - lease.acquired_at_ms);
  const item = h(
    "li",
    { class: "lease" },
    h("span", { class: "fence" }, h("span", { class: "label" }, "fencing token "), h("span", { class: "token" }, String(lease.fencing_token))),
    lease.value === null
      ? h("span", { class: "value muted" }, "no value")
      : h("span", { class: "value" }, h("span", { class: "visually-hidden" }, "value "), lease.value),
    lease.holds > 1 ? h("span", { class: "holds" }, format.plural(lease.holds, "hold")) : null,
    h(
      "span",
      { class: "left", "data-expires-at": lease.expires_at_ms, "data-lease-ms": leaseMs },
      h("span", { class: "bar", "aria-hidden": "true" }, h("span", { class: "fill" })),
      h("span", { class: "left-text" }, ""),
    ),
  );
  showTimeLeft(item, clock.now());
  return item;
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

/** Updates every lease under `root` to the time left now, as often as `everyMs`, until `signal` aborts. */
export function runCountdowns(root: HTMLElement, clock: ServerClock, signal: AbortSignal, everyMs = 100): void {
  const timer = setInterval(() => showTimeLeft(root, clock.now()), everyMs);
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}

/** Sets every lease bar under `root` to the time left at `now` (Redis clock). */
function showTimeLeft(root: HTMLElement, now: number): void {
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
