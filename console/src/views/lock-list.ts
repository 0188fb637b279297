/**
 * The held locks whose key starts with a prefix (`GET /locks`), a page at
 * a time, read twice a second: each with its mode, holders (fencing token,
 * value, lease counting down) and waiters in order, and a link to its own
 * page.
 *
 * The view ties the parts together: the page asked for
 * (`lock-list-state.ts`) changes with the filter and the pager, and each
 * answer shows in the list (`lock-list-layout.ts`, `lock-card.ts`).
 */

import type { View } from "../context";
import { poll, Waker } from "../poll";
import { runCountdowns } from "./leases";
import { lockListLayout, showLocks, showProblem } from "./lock-list-layout";
import { answered, firstPage, type ListPaging, nextPage, previousPage } from "./lock-list-state";
import { listRoute } from "./routes";

const PAGE_SIZE = 50;
const EVERY_MS = 500;

export function lockListView(prefix: string): View {
  return (root, context, signal) => {
    const parts = lockListLayout(root, prefix);
    let paging = firstPage(prefix);
    const waker = new Waker();
    // Each new page asked for is a new question: an answer to an older
    // one that arrives after it is dropped.
    const ask = (next: ListPaging) => {
      if (next === paging) return;
      paging = next;
      waker.wake();
    };
    parts.form.addEventListener("submit", (event) => {
      event.preventDefault();
      const wanted = parts.input.value.trim();
      history.replaceState(null, "", listRoute(wanted));
      ask(firstPage(wanted));
    });
    parts.later.addEventListener("click", () => ask(nextPage(paging)));
    parts.earlier.addEventListener("click", () => ask(previousPage(paging)));

    runCountdowns(parts.list, context.clock, signal);
    const read = async (tickSignal: AbortSignal) => {
      const asked = paging;
      const { body } = await context.gateway.listLocks(asked.prefix, asked.cursor, PAGE_SIZE, tickSignal);
      if (asked !== paging) return;
      const first = body.locks[0];
      if (first) context.clock.observeLock(first);
      paging = answered(paging, body.next_cursor);
      showLocks(parts, body.locks, paging, context.clock);
    };
    void poll(read, { everyMs: EVERY_MS, signal, token: context.token, onProblem: (problem) => showProblem(parts, problem), waker });
  };
}
