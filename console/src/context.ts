/** What every view is given: the gateway, the token, the link state and the Redis clock. */

import type { AdminToken } from "./admin-token";
import type { Gateway } from "./gateway";
import type { Link } from "./link";
import type { ServerClock } from "./server-clock";

export interface Context {
  gateway: Gateway;
  token: AdminToken;
  link: Link;
  clock: ServerClock;
}

/** A view draws into `root` and stops everything it started when `signal` aborts. */
export type View = (root: HTMLElement, context: Context, signal: AbortSignal) => void;
