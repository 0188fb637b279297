/**
 * The plain lease API: a lock held by its token, whose holder extends the
 * lease itself (`POST /locks`, `PUT /locks/{key}/ttl`, `DELETE /locks/{key}`).
 *
 * Prefer `Gateway.acquire`, where the gateway renews the lease; use this
 * when the lock must outlive a connection, or be handed to another process.
 */

import { GatewayUnavailableError, hasSlug } from "./errors.js";
import { lockPath, type Transport } from "./http.js";
import { readGatewayJson } from "./json.js";
import { backoffMs, sleep } from "./sleep.js";
import type {
  AcquireBody,
  AcquireOptions,
  ExtendBody,
  Grant,
  HoldsLeft,
  Lease,
  LeaseState,
  LockMode,
  ModeBody,
  ModeChange,
  ValueBody,
} from "./types.js";

export interface LeaseOptions extends AcquireOptions {
  /**
   * Names this acquisition for the gateway (`Idempotency-Key`), so that a
   * retry after a lost answer is given the same grant instead of a second
   * one. A fresh UUID per call by default; give your own only to retry an
   * acquisition across calls, with the same options.
   */
  idempotencyKey?: string;
  /** Retries after a network error, a timeout or a 503 (default 2). */
  retries?: number;
}

/** The `body` of `POST /locks`, from the options. */
export function acquireBody(key: string, options: AcquireOptions): AcquireBody {
  const body: AcquireBody = { key };
  if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
  if (options.waitMs !== undefined) body.wait_ms = options.waitMs;
  if (options.mode !== undefined) body.mode = options.mode;
  if (options.limit !== undefined) body.limit = options.limit;
  if (options.permits !== undefined) body.permits = options.permits;
  if (options.value !== undefined) body.value = options.value;
  if (options.session !== undefined) body.session = options.session;
  return body;
}

export class Leases {
  /** @internal Made by `Gateway`. */
  constructor(private readonly transport: Transport) {}

  /**
   * Takes `key` for `ttlMs` (extend it before it ends, or lose it). Rejects
   * with `LockHeldError` when it is held and the wait runs out.
   *
   * When the answer is lost (a reset connection, a timeout, a 503) the
   * request is sent again with the same `Idempotency-Key` and body: if the
   * first attempt had been granted, the gateway answers that grant again
   * (`replayed: true`) rather than making a second one that nobody would
   * ever release.
   */
  async acquire(key: string, options: LeaseOptions = {}): Promise<Lease> {
    const idempotencyKey = options.idempotencyKey ?? crypto.randomUUID();
    const retries = options.retries ?? 2;
    const body = acquireBody(key, options);
    for (let attempt = 0; ; attempt++) {
      try {
        const answer = await this.transport.request("POST", "/locks", {
          body,
          headers: { "idempotency-key": idempotencyKey },
          signal: options.signal,
          timeoutMs: (options.waitMs ?? 0) + this.transport.timeoutMs,
        });
        const grant = readGatewayJson<Grant>(answer.text);
        return { ...grant, replayed: answer.headers.get("idempotent-replayed") === "true" };
      } catch (error) {
        if (!(error instanceof GatewayUnavailableError) || attempt >= retries) throw error;
        await sleep(backoffMs(attempt, error.retryAfterMs), options.signal);
      }
    }
  }

  /**
   * Re-enters a lock held by `token`: one more hold (each `release` gives one
   * back) and the lease reset to `ttlMs`. Rejects with `NotOwnerError` when
   * the token does not hold it.
   */
  async reenter(key: string, token: string, options: { ttlMs?: number; signal?: AbortSignal } = {}): Promise<Lease> {
    const body: AcquireBody = { key, token };
    if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
    const answer = await this.transport.request("POST", "/locks", { body, signal: options.signal });
    return { ...readGatewayJson<Grant>(answer.text), replayed: false };
  }

  /**
   * Makes the lease end `ttlMs` from now. Rejects with `LockLostError` when
   * the lease already ended (stop working on the resource), `NotOwnerError`
   * when another owner holds the lock.
   */
  async extend(key: string, token: string, ttlMs: number, options: { signal?: AbortSignal } = {}): Promise<LeaseState> {
    const answer = await this.transport.request("PUT", lockPath(key, "/ttl"), {
      body: { token, ttl_ms: ttlMs } satisfies ExtendBody,
      signal: options.signal,
    });
    return readGatewayJson<LeaseState>(answer.text);
  }

  /**
   * Gives one hold back; resolves with the holds left (0: the lock is free).
   * Rejects with `LockLostError` when there is no such lock (its lease
   * ended), `NotOwnerError` when another owner holds it.
   */
  async release(key: string, token: string, options: { signal?: AbortSignal } = {}): Promise<number> {
    const answer = await this.transport.request("DELETE", lockPath(key), {
      headers: { "lock-token": token },
      signal: options.signal,
    });
    return answer.status === 204 ? 0 : readGatewayJson<HoldsLeft>(answer.text).holds;
  }

  /**
   * Upgrades (`"exclusive"`) or downgrades (`"shared"`) the hold of `key`
   * held by `token`, without letting go (`PUT /locks/{key}/mode`). An
   * upgrade waits up to `waitMs` for the other shared holders to leave, and
   * gets a new, larger fencing token; it rejects with `LockHeldError` when
   * the wait ran out (the shared hold is kept) and `DeadlockError` when
   * another holder is upgrading already. A downgrade keeps the token.
   */
  async changeMode(
    key: string,
    token: string,
    mode: LockMode,
    options: { waitMs?: number; signal?: AbortSignal } = {},
  ): Promise<ModeChange> {
    const body: ModeBody = { token, mode };
    if (options.waitMs !== undefined) body.wait_ms = options.waitMs;
    const answer = await this.transport.request("PUT", lockPath(key, "/mode"), {
      body,
      signal: options.signal,
      timeoutMs: (options.waitMs ?? 0) + this.transport.timeoutMs,
    });
    return readGatewayJson<ModeChange>(answer.text);
  }

  /** Replaces the holder's public value (`PUT /locks/{key}/value`). */
  async setValue(key: string, token: string, value: string, options: { signal?: AbortSignal } = {}): Promise<LeaseState> {
    const answer = await this.transport.request("PUT", lockPath(key, "/value"), {
      body: { token, value } satisfies ValueBody,
      signal: options.signal,
    });
    return readGatewayJson<LeaseState>(answer.text);
  }

  /**
   * @internal Gives every hold of `token` back, until the lock is free or
   * not ours any more (then there is nothing left to give back).
   */
  async releaseAll(key: string, token: string): Promise<void> {
    for (;;) {
      let holdsLeft: number;
      try {
        holdsLeft = await this.release(key, token);
      } catch (error) {
        if (hasSlug(error, "lock-not-found") || hasSlug(error, "not-owner")) return;
        throw error;
      }
      if (holdsLeft === 0) return;
    }
  }
}
