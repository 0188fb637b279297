/**
 * Leader election on a lock, in the manner of etcd's `concurrency.Election`:
 * the leader is the holder of a streamed lock whose `value` is its address;
 * the other candidates wait in the lock's queue; the fencing token is the
 * leader's term, so a deposed leader's writes can be refused by term.
 */

import { GatewayUnavailableError, InvalidRequestError, LockHeldError } from "./errors.js";
import type { Lock } from "./lock.js";
import { backoffMs, sleep } from "./sleep.js";
import type { FreeLock, LeaseView, LockOptions, LockStatus } from "./types.js";
import type { LockWatch, WatchOptions } from "./watch.js";

/** What an election asks of its gateway (a `Gateway`, named by shape so
 * that the gateway, which makes elections, and the election do not import
 * each other). */
export interface ElectionGateway {
  acquire(key: string, options?: LockOptions): Promise<Lock>;
  inspect(key: string, options?: { signal?: AbortSignal }): Promise<LockStatus | FreeLock | null>;
  watch(key: string, options?: WatchOptions): LockWatch;
}

export interface ElectionOptions {
  /**
   * The leader's lease (default: the gateway's, 30 000). The gateway renews
   * it while the leader's stream is open; it bounds how long a leader whose
   * gateway died stays in office.
   */
  ttlMs?: number;
}

export interface CampaignOptions {
  /** The candidate's public value, such as its address: what `leader()` and `observe()` show. */
  value?: string;
  /** Gives up the campaign: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * How long each request waits in the queue before asking again (default
   * 60 000, the gateway's usual maximum; lowered to the gateway's own if it
   * allows less).
   */
  waitMs?: number;
  /** Called with the candidate's place in the queue while it waits. */
  onQueued?: (position: number) => void;
}

/** Who leads: its public value and its term. */
export interface Leader {
  value: string | null;
  /** The leader's fencing token: larger for every new term. */
  term: bigint;
}

/** Holding office. `signal` aborts when the office is lost; `resign()` hands it on. */
export class Leadership implements AsyncDisposable {
  /** @internal Made by `Election.campaign`. */
  constructor(readonly lock: Lock) {}

  /** The term: the lock's fencing token. */
  get term(): bigint {
    return this.lock.fencingToken;
  }

  get value(): string | undefined {
    return this.lock.value;
  }

  /** Aborts, with a `LockLostError`, when leadership is lost. */
  get signal(): AbortSignal {
    return this.lock.signal;
  }

  get lost(): boolean {
    return this.lock.lost;
  }

  /** Publishes a new value for the leader (etcd's "proclaim"). */
  proclaim(value: string): Promise<void> {
    return this.lock.setValue(value);
  }

  /** Steps down: the next candidate in the queue is elected at once. */
  resign(): Promise<void> {
    return this.lock.release();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.resign();
  }
}

export class Election {
  /** @internal Made by `Gateway.election`. */
  constructor(
    private readonly gateway: ElectionGateway,
    readonly key: string,
    private readonly options: ElectionOptions,
  ) {}

  /**
   * Waits until this candidate is elected, however long that takes, and
   * resolves with its `Leadership`. An unreachable gateway is retried with
   * backoff; rejects only when `signal` aborts or the request is invalid.
   */
  async campaign(options: CampaignOptions = {}): Promise<Leadership> {
    let waitMs = options.waitMs ?? 60_000;
    let failures = 0;
    for (;;) {
      options.signal?.throwIfAborted();
      try {
        const lock = await this.gateway.acquire(this.key, {
          ...(this.options.ttlMs === undefined ? {} : { ttlMs: this.options.ttlMs }),
          waitMs,
          ...(options.value === undefined ? {} : { value: options.value }),
          ...(options.signal === undefined ? {} : { signal: options.signal }),
          ...(options.onQueued === undefined ? {} : { onQueued: options.onQueued }),
        });
        return new Leadership(lock);
      } catch (error) {
        if (options.signal?.aborted) throw options.signal.reason;
        if (error instanceof LockHeldError) {
          failures = 0;
          // The wait ran out with the office still held: ask again (after a
          // pause only if the waits are too short to pace the loop).
          if (waitMs < 1_000) await sleep(Math.min(error.retryAfterMs ?? 1_000, 1_000), options.signal);
          continue;
        }
        const maximum = error instanceof InvalidRequestError ? error.problem?.maximum : undefined;
        if (error instanceof InvalidRequestError && error.problem?.field === "wait_ms" && typeof maximum === "number" && maximum < waitMs) {
          waitMs = maximum;
          continue;
        }
        if (error instanceof GatewayUnavailableError) {
          await sleep(backoffMs(failures++, error.retryAfterMs, 250), options.signal);
          continue;
        }
        throw error;
      }
    }
  }

  /** The leader now (`GET /locks/{key}`), or `null` when there is none. */
  async leader(options: { signal?: AbortSignal } = {}): Promise<Leader | null> {
    const status = await this.gateway.inspect(this.key, options);
    return status?.held ? leaderOf(status.leases[0]) : null;
  }

  /**
   * Every change of leader, as it happens: first who leads now (or `null`),
   * then each new leader, `null` whenever the office is empty, and the
   * leader again when it proclaims a new value. Ends when `signal` aborts.
   */
  async *observe(options: { signal?: AbortSignal } = {}): AsyncGenerator<Leader | null, void, undefined> {
    let current: Leader | null | undefined;
    for await (const event of this.gateway.watch(this.key, options)) {
      let next = current;
      switch (event.type) {
        case "snapshot":
          next = event.data.held ? leaderOf(event.data.leases[0]) : null;
          break;
        case "acquired":
          next = { value: event.data.value, term: event.data.fencingToken };
          break;
        case "value":
          if (current && current.term === event.data.fencingToken) next = { ...current, value: event.data.value };
          break;
        case "released":
        case "expired":
        case "revoked":
          if (current && current.term === event.data.fencingToken) next = null;
          break;
        case "delayed":
          // The office stays empty a while longer: no new leader.
          continue;
        case "gap":
          // A snapshot follows.
          continue;
      }
      if (next !== undefined && !sameLeader(next, current)) {
        current = next;
        yield next;
      }
    }
  }
}

function leaderOf(lease: LeaseView | undefined): Leader | null {
  return lease ? { value: lease.value, term: lease.fencingToken } : null;
}

function sameLeader(a: Leader | null, b: Leader | null | undefined): boolean {
  if (a === null || b === null || b === undefined) return a === b;
  return a.term === b.term && a.value === b.value;
}
