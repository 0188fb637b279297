/**
 * The held locks whose key starts with a prefix (`GET /locks`), a page at
 * a time, read twice a second: each with its mode, holders (fencing token,
 * value, lease counting down) and waiters in order, and a link to its own
 * page.
 */

import type { Context, View } from "../context";
import { h, reorderChildren, replaceChildren, setText } from "../dom";
import * as format from "../format";
import type { HeldLock } from "../gateway";
import { poll, Waker } from "../poll";
import { leaseItem, modeLabel, problemNotice, runCountdowns, waiterList } from "./leases";

const PAGE_SIZE = 50;
const EVERY_MS = 500;

/** `#/locks?prefix=...`: the route of the list with a prefix. */
export function listRoute(prefix: string): string {
  return prefix ? `#/locks?${new URLSearchParams({ prefix })}` : "#/locks";
}

/** `#/locks/<key>`: the route of one lock's page. */
export function lockRoute(key: string): string {
  return `#/locks/${encodeURIComponent(key)}`;
}

export function lockListView(prefix: string): View {
  return (root, context, signal) => {
    let cursor: string | null = null;
    let previousCursors: (string | null)[] = [];
    let nextCursor: string | null = null;

    const input = h("input", {
      id: "prefix",
      name: "prefix",
      type: "search",
      value: prefix,
      autocomplete: "off",
      spellcheck: "false",
      placeholder: "orders:",
      "aria-describedby": "prefix-hint",
    });
    const form = h(
      "form",
      { class: "filter", role: "search" },
      h("label", { for: "prefix" }, "Key prefix"),
      input,
      h("button", { type: "submit" }, "Show"),
      h("p", { id: "prefix-hint", class: "hint" }, "Held locks whose key starts with this text; empty for all."),
    );
    const summary = h("p", { class: "summary", role: "status" }, "Reading the held locks…");
    const problem = h("div", {});
    const list = h("ul", { class: "lock-list", "aria-label": "Held locks" });
    const earlier = h("button", { type: "button", disabled: true }, "Previous page");
    const later = h("button", { type: "button", disabled: true }, "Next page");
    const pager = h("nav", { class: "pager", "aria-label": "Pages of locks", hidden: true }, earlier, later);

    replaceChildren(
      root,
      h("h1", { tabindex: "-1" }, "Locks"),
      form,
      summary,
      problem,
      list,
      pager,
    );

    const entries = new Map<string, LockEntry>();
    let pageNumber = 1;

    const render = (locks: HeldLock[]) => {
      const seen = new Set<string>();
      const wanted = locks.map((lock) => {
        seen.add(lock.key);
        let entry = entries.get(lock.key);
        if (!entry) {
          entry = new LockEntry(lock.key);
          entries.set(lock.key, entry);
        }
        entry.update(lock, context);
        return entry.element;
      });
      for (const key of [...entries.keys()]) if (!seen.has(key)) entries.delete(key);
      reorderChildren(list, wanted);
      const where = prefix ? ` starting with “${prefix}”` : "";
      const page = pageNumber > 1 || nextCursor ? ` (page ${pageNumber})` : "";
      setText(
        summary,
        locks.length === 0 ? `No held lock${where}${page}.` : `${format.plural(locks.length, "held lock")}${where}${page}.`,
      );
      earlier.disabled = previousCursors.length === 0;
      later.disabled = nextCursor === null;
      pager.hidden = earlier.disabled && later.disabled;
    };

    // Each change of prefix or page is a new question: an answer to an
    // older one that arrives after it is dropped.
    let question = 0;
    const waker = new Waker();
    const refreshNow = () => {
      question += 1;
      waker.wake();
    };

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      prefix = input.value.trim();
      cursor = null;
      previousCursors = [];
      pageNumber = 1;
      history.replaceState(null, "", listRoute(prefix));
      refreshNow();
    });
    later.addEventListener("click", () => {
      if (nextCursor === null) return;
      previousCursors.push(cursor);
      cursor = nextCursor;
      pageNumber += 1;
      refreshNow();
    });
    earlier.addEventListener("click", () => {
      cursor = previousCursors.pop() ?? null;
      pageNumber = Math.max(1, pageNumber - 1);
      refreshNow();
    });

    runCountdowns(list, context.clock, signal);
    void poll(
      async (tickSignal) => {
        const asked = question;
        const { body } = await context.gateway.listLocks(prefix, cursor, PAGE_SIZE, tickSignal);
        if (asked !== question) return;
        const first = body.locks[0];
        if (first) context.clock.observeLock(first);
        nextCursor = body.next_cursor;
        render(body.locks);
      },
      {
        everyMs: EVERY_MS,
        signal,
        token: context.token,
        onProblem: (refusal) => replaceChildren(problem, refusal ? problemNotice(refusal) : null),
        waker,
      },
    );
  };
}

/**
 * One lock of the list. Its link stays the same element from answer to
 * answer (so keyboard focus stays on it); the rest is redrawn only when
 * what it shows changed.
 */
class LockEntry {
  readonly element: HTMLLIElement;
  private readonly details: HTMLDivElement;
  private shown = "";

  constructor(key: string) {
    const link = h("a", { href: lockRoute(key), class: "key" }, key);
    this.details = h("div", { class: "lock-details" });
    this.element = h("li", { class: "lock-card", "data-key": key }, h("h2", {}, link), this.details);
  }

  update(lock: HeldLock, context: Context): void {
    const leases = lock.leases ?? [];
    const waiters = lock.waiters ?? [];
    // Waiting times grow by themselves; redraw them at most once a second.
    const fingerprint = JSON.stringify([lock.mode, lock.limit, leases, waiters.map((w) => [w.position, w.mode]), Math.floor(Date.now() / 1000)]);
    if (fingerprint === this.shown) return;
    this.shown = fingerprint;
    replaceChildren(
      this.details,
      h(
        "p",
        { class: "facts" },
        h("span", { class: "chip" }, modeLabel(lock.mode, lock.limit)),
        h("span", {}, format.plural(lock.holders, "holder")),
        h("span", {}, waiters.length === 0 ? "nobody waiting" : `${format.count(waiters.length)} waiting`),
      ),
      h("ul", { class: "leases", "aria-label": `Holders of ${lock.key}` }, ...leases.map((lease) => leaseItem(lease, context.clock))),
      waiters.length > 0 ? waiterList(waiters, context.clock) : null,
    );
  }
}
