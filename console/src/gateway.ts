/**
 * The gateway's HTTP API as the console uses it: the routes, the shapes of
 * their answers, and what a refusal or a lost connection becomes.
 *
 * Every request carries the admin token (when one was typed) and is
 * bounded in time; every answer is read by the TypeScript client's exact
 * JSON reader, so fencing tokens keep all their digits (as `bigint`s).
 * Requests go to the page's own origin, so the console works wherever the
 * gateway is served from, nginx included. The shapes below are checked
 * against `openapi/openapi.json` by `tests/contract.test.mjs`.
 */

import { parseGatewayJson } from "../../clients/typescript/src/json";
import type { AdminToken } from "./admin-token";
import type { Link } from "./link";

/** A fencing token, exact: the page shows it, compares it, and does no arithmetic on it. */
export type FencingToken = bigint;

/** The problem slugs the console tells apart (`/problems/<slug>`). */
export type ProblemSlug = "backend-unavailable";

/** One holder's lease (`leases[]` of `GET /locks/{key}`). */
export interface Lease {
  fencing_token: FencingToken;
  value: string | null;
  holds: number;
  acquired_at_ms: number;
  /** A session's holder's lease is its session's. */
  expires_at_ms: number;
  /** The public handle of the session the hold hangs on (never the session's id), when it does. */
  session?: string | null;
  /** The places of a counting lock the hold takes (absent for other kinds). */
  permits?: number | null;
}

/** A request waiting for the lock, in the order it will be served. */
export interface Waiter {
  position: number;
  mode: string;
  waiting_since_ms: number;
}

/** `GET /locks/{key}` of a held lock, and each entry of `GET /locks`. */
export interface HeldLock {
  key: string;
  held: true;
  ttl_ms: number;
  expires_at_ms: number;
  fencing_token: FencingToken;
  holds: number;
  mode: string;
  /** Absent for shared locks; above 1 for counting locks. */
  limit?: number;
  holders: number;
  leases?: Lease[];
  waiters?: Waiter[];
}

/** A lock nobody holds: a `snapshot`, or `GET /locks/{key}` while a lock-delay is in force. */
export interface FreeLock {
  key: string;
  held: false;
  waiters?: Waiter[];
  /** Until when nobody is granted it (the lock-delay of a session that held it); absent when none is in force. */
  delayed_until_ms?: number;
}

export interface LockPage {
  locks: HeldLock[];
  next_cursor: string | null;
}

/** One sale as `GET /seckill` lists it. Counters only grow within a sale; a reset starts them again. */
export interface Sale {
  sku: string;
  stock: number;
  initial_stock: number;
  sold: number;
  per_user_limit: number;
  /** The Redis slots its stock and records are spread over (1 unless set); every figure is the whole sale's. */
  segments?: number;
  orders: number;
  /** Orders stored by the hand-off, and recorded but not stored yet; null when no hand-off runs. */
  stored?: number | null;
  pending?: number | null;
  refused?: { sold_out: number; limit_exceeded: number; rate_limited: number };
}

/** The data formats a build reads and writes (`writes`: the highest; it writes the one in use when that is lower). */
export interface Formats {
  reads: number[];
  writes: number;
}

/** One live instance of the fleet (`instances[]` of `GET /admin/instances`), as its record said at its last beat. */
export interface Instance {
  /** Its configured id, the one its answers carry as `X-Instance-Id`. */
  id: string;
  version: string;
  formats: Formats;
  /** Unix ms, by that instance's clock. */
  started_at_ms: number;
  address: string;
}

/** `GET /admin/instances`: the live instances, oldest first. */
export interface InstanceList {
  instances: Instance[];
}

/** `GET /version`: the answering instance's build, and the data format in use on Redis. */
export interface GatewayVersion {
  version: string;
  formats: Formats;
  /** Null until that instance first read it from Redis. */
  format_in_use?: number | null;
}

/** An RFC 9457 problem document, as every refusal carries. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
}

/** The gateway answered with a problem. */
export class Refusal extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail ?? problem.title);
  }

  /** The answer to a missing (401) or wrong (403) token. */
  get isAccessDenied(): boolean {
    return this.problem.status === 401 || this.problem.status === 403;
  }
}

/** No answer from the gateway. */
export class GatewayUnreachable extends Error {}

/** How long a request may take before the gateway counts as lost. */
const REQUEST_TIMEOUT_MS = 5000;

export interface Answer<T> {
  status: number;
  body: T;
}

export class Gateway {
  constructor(
    private readonly token: AdminToken,
    private readonly link: Link,
  ) {}

  /** Who holds which locks: a page of the held locks whose key starts with `prefix`. */
  listLocks(prefix: string, cursor: string | null, limit: number, signal: AbortSignal) {
    const query = new URLSearchParams({ prefix, limit: String(limit) });
    if (cursor) query.set("cursor", cursor);
    return this.request<LockPage>("GET", `/locks?${query}`, signal);
  }

  /**
   * One lock: its holders and waiters, or (`held: false`) a free lock under
   * a lock-delay; 404 `lock-not-found` when nobody holds it.
   */
  lock(key: string, signal: AbortSignal) {
    return this.request<HeldLock | FreeLock>("GET", lockPath(key), signal);
  }

  /**
   * Ends the one hold of `key` with this fencing token (admin token), never
   * another holder's: 204, or 404 when that hold is gone.
   */
  revoke(key: string, fencingToken: FencingToken, signal: AbortSignal) {
    const query = new URLSearchParams({ force: "true", fencing_token: String(fencingToken) });
    return this.request<null>("DELETE", `${lockPath(key)}?${query}`, signal);
  }

  /** Every sale (admin token). */
  sales(signal: AbortSignal) {
    return this.request<{ sales: Sale[] }>("GET", "/seckill", signal);
  }

  /** Every live instance on this Redis, oldest first (admin token). */
  instances(signal: AbortSignal) {
    return this.request<InstanceList>("GET", "/admin/instances", signal);
  }

  /** The answering instance's version and data formats, and the format in use (no token needed). */
  version(signal: AbortSignal) {
    return this.request<GatewayVersion>("GET", "/version", signal);
  }

  /** Whether the gateway answers at all (`GET /healthz`); the answer itself says nothing more. */
  health(signal: AbortSignal) {
    return this.request<unknown>("GET", "/healthz", signal);
  }

  /** Opens `GET /locks/{key}/events`; the caller reads the body as it streams. */
  async events(key: string, lastEventId: string | undefined, signal: AbortSignal): Promise<Response> {
    const headers = this.headers("text/event-stream");
    if (lastEventId) headers.set("Last-Event-ID", lastEventId);
    // No timeout here: the stream is meant to stay open (the reader watches for silence).
    const response = await this.fetch(`${lockPath(key)}/events`, { headers, signal }, signal);
    if (!response.ok) throw await this.refusal(response);
    return response;
  }

  private async request<T>(method: string, path: string, signal: AbortSignal): Promise<Answer<T>> {
    const timeout = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
    const init: RequestInit = {
      method,
      headers: this.headers("application/json"),
      signal: AbortSignal.any([signal, timeout]),
      cache: "no-store",
    };
    const response = await this.fetch(path, init, signal);
    if (!response.ok) throw await this.refusal(response);
    const text = await response.text();
    return { status: response.status, body: (text ? parseGatewayJson(text) : null) as T };
  }

  private headers(accept: string): Headers {
    const headers = new Headers({ Accept: accept });
    const token = this.token.value;
    if (token) headers.set("Authorization", `Bearer ${token}`);
    return headers;
  }

  /** `fetch`, with a failure to get any answer turned into `GatewayUnreachable`. */
  private async fetch(path: string, init: RequestInit, signal: AbortSignal): Promise<Response> {
    let response: Response;
    try {
      response = await fetch(path, { ...init, credentials: "same-origin" });
    } catch (error) {
      if (signal.aborted) throw error;
      const timedOut = error instanceof DOMException && error.name === "TimeoutError";
      const reason = timedOut ? `no answer within ${REQUEST_TIMEOUT_MS / 1000} s` : "no connection";
      this.link.unreachable(reason);
      throw new GatewayUnreachable(reason);
    }
    const fromGateway = response.headers.has("x-instance-id");
    if (!fromGateway && [502, 503, 504].includes(response.status)) {
      // A proxy in front answered for an instance that did not.
      const reason = `the proxy answered ${response.status}`;
      this.link.unreachable(reason);
      throw new GatewayUnreachable(reason);
    }
    this.link.answered(response.headers.get("x-instance-id"));
    return response;
  }

  private async refusal(response: Response): Promise<Refusal> {
    let problem: Problem = { type: "about:blank", title: response.statusText || "Refused", status: response.status };
    if (response.headers.get("content-type")?.includes("json")) {
      try {
        problem = { ...problem, ...(parseGatewayJson(await response.text()) as Partial<Problem>) };
      } catch {
        // Not the problem document it claimed to be: the status says enough.
      }
    }
    if (hasSlug(problem, "backend-unavailable")) {
      this.link.backendDown(problem.detail ?? problem.title);
    }
    return new Refusal(problem);
  }
}

/** Whether `problem` is of the kind `slug` names. */
export function hasSlug(problem: Problem, slug: ProblemSlug): boolean {
  return problem.type.endsWith(`/${slug}`);
}

function lockPath(key: string): string {
  return `/locks/${encodeURIComponent(key)}`;
}
