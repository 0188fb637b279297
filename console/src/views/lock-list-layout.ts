/**
 * The DOM of the list of held locks: the prefix filter, a sentence, the
 * cards of the locks and the pager, and how a page of locks shows in them.
 */

import { h, reorderChildren, replaceChildren, setText } from "../dom";
import type { HeldLock, Problem } from "../gateway";
import type { ServerClock } from "../server-clock";
import { problemNotice } from "./leases";
import { LockCard } from "./lock-card";
import { type ListPaging, listSummary, pagerLinks } from "./lock-list-state";

/** The parts of the list that change or are used. */
export interface ListParts {
  form: HTMLFormElement;
  input: HTMLInputElement;
  summary: HTMLParagraphElement;
  problem: HTMLDivElement;
  list: HTMLUListElement;
  earlier: HTMLButtonElement;
  later: HTMLButtonElement;
  pager: HTMLElement;
  /** The card of each lock shown, by key. */
  cards: Map<string, LockCard>;
}

/** Draws the list into `root`, its filter set to `prefix`. */
export function lockListLayout(root: HTMLElement, prefix: string): ListParts {
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
  const earlier = h("button", { type: "button", disabled: true }, "Previous page");
  const later = h("button", { type: "button", disabled: true }, "Next page");
  const parts: ListParts = {
    form,
    input,
    summary: h("p", { class: "summary", role: "status" }, "Reading the held locks…"),
    problem: h("div", {}),
    list: h("ul", { class: "lock-list", "aria-label": "Held locks" }),
    earlier,
    later,
    pager: h("nav", { class: "pager", "aria-label": "Pages of locks", hidden: true }, earlier, later),
    cards: new Map(),
  };
  replaceChildren(root, h("h1", { tabindex: "-1" }, "Locks"), form, parts.summary, parts.problem, parts.list, parts.pager);
  return parts;
}

/** Shows a page of held locks: a card each, in the answer's order, the sentence and the pager. */
export function showLocks(parts: ListParts, locks: HeldLock[], paging: ListPaging, clock: ServerClock): void {
  const wanted = locks.map((lock) => {
    let card = parts.cards.get(lock.key);
    if (!card) {
      card = new LockCard(lock.key);
      parts.cards.set(lock.key, card);
    }
    card.update(lock, clock);
    return card.element;
  });
  const shown = new Set(locks.map((lock) => lock.key));
  for (const key of [...parts.cards.keys()]) if (!shown.has(key)) parts.cards.delete(key);
  reorderChildren(parts.list, wanted);
  setText(parts.summary, listSummary(paging, locks.length));
  const links = pagerLinks(paging);
  parts.earlier.disabled = !links.earlier;
  parts.later.disabled = !links.later;
  parts.pager.hidden = !links.earlier && !links.later;
}

/** Shows a refusal of the reads, or clears it (`null`). */
export function showProblem(parts: ListParts, problem: Problem | null): void {
  replaceChildren(parts.problem, problem ? problemNotice(problem) : null);
}
