/** The fragments that name the lock views (`main.ts` routes them). */

/** `#/locks?prefix=...`: the route of the list with a prefix. */
export function listRoute(prefix: string): string {
  return prefix ? `#/locks?${new URLSearchParams({ prefix })}` : "#/locks";
}

/** `#/locks/<key>`: the route of one lock's page. */
export function lockRoute(key: string): string {
  return `#/locks/${encodeURIComponent(key)}`;
}
