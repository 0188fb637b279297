/**
 * Which page of the held locks the list shows, and how the filter, the
 * pager and each answer move it: pure functions, no DOM, no requests.
 */

import * as format from "../format";

export interface ListPaging {
  /** Held locks whose key starts with this. */
  prefix: string;
  /** Where the page shown begins: null for the first. */
  cursor: string | null;
  /** The cursors of the pages before, nearest last. */
  previous: (string | null)[];
  /** 1 for the first page. */
  page: number;
  /** Where the next page begins, as the last answer said: null on the last page. */
  next: string | null;
}

/** The first page of the locks under `prefix`. */
export function firstPage(prefix: string): ListPaging {
  return { prefix, cursor: null, previous: [], page: 1, next: null };
}

/** `paging` with the next page's cursor an answer gave. */
export function answered(paging: ListPaging, next: string | null): ListPaging {
  return { ...paging, next };
}

/** The page after, if there is one. */
export function nextPage(paging: ListPaging): ListPaging {
  if (paging.next === null) return paging;
  return { ...paging, cursor: paging.next, previous: [...paging.previous, paging.cursor], page: paging.page + 1 };
}

/** The page before, or the first. */
export function previousPage(paging: ListPaging): ListPaging {
  return {
    ...paging,
    cursor: paging.previous.at(-1) ?? null,
    previous: paging.previous.slice(0, -1),
    page: Math.max(1, paging.page - 1),
  };
}

/** Whether the pager's buttons lead anywhere. */
export function pagerLinks(paging: ListPaging): { earlier: boolean; later: boolean } {
  return { earlier: paging.previous.length > 0, later: paging.next !== null };
}

/** The list in one sentence: how many held locks, under which prefix, on which page. */
export function listSummary(paging: ListPaging, locks: number): string {
  const where = paging.prefix ? ` starting with “${paging.prefix}”` : "";
  const page = paging.page > 1 || paging.next ? ` (page ${paging.page})` : "";
  return locks === 0 ? `No held lock${where}${page}.` : `${format.plural(locks, "held lock")}${where}${page}.`;
}
