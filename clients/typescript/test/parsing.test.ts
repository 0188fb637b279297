/**
 * The pure parts: JSON that keeps fencing tokens exact, and the mapping of
 * problem documents to errors. (The event stream reader has its own file.)
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  DeadlockError,
  GatewayUnavailableError,
  InvalidRequestError,
  LockHeldError,
  LockLostError,
  LockgateError,
  NotOwnerError,
  SessionNotFoundError,
} from "lockgate";
import { errorFromProblem } from "../dist/errors.js";
import { parseGatewayJson, quoteUnsafeIntegers, readGatewayJson } from "../dist/json.js";

describe("gateway JSON", () => {
  it("keeps a fencing token above 2^53 exact, as a bigint", () => {
    const text = '{"key":"k","fencing_token":1795331974189167001,"ttl_ms":30000}';
    const parsed = parseGatewayJson(text) as { fencing_token: bigint; ttl_ms: number };
    assert.equal(parsed.fencing_token, 1795331974189167001n);
    assert.equal(parsed.ttl_ms, 30000);
    // JSON.parse alone would have rounded it.
    assert.notEqual(BigInt(JSON.parse(text).fencing_token), 1795331974189167001n);
  });

  it("keeps every digit from 2^53 + 1 up to the largest 64-bit token", () => {
    for (const token of ["9007199254740993", "18446744073709551615"]) {
      const parsed = parseGatewayJson(`{"fencing_token":${token},"leases":[{"fencing_token":${token}}]}`) as {
        fencing_token: bigint;
        leases: { fencing_token: bigint }[];
      };
      assert.equal(parsed.fencing_token, BigInt(token));
      assert.equal(parsed.leases[0]!.fencing_token, BigInt(token));
    }
  });

  it("turns fencing tokens into bigints at any depth, and small ones too", () => {
    const parsed = readGatewayJson<{ fencingToken: bigint; leases: { fencingToken: bigint; acquiredAtMs: number }[] }>(
      '{"fencing_token":7,"leases":[{"fencing_token":9007199254740993,"acquired_at_ms":1795331974189}]}',
    );
    assert.equal(parsed.fencingToken, 7n);
    assert.equal(parsed.leases[0]!.fencingToken, 9007199254740993n);
    assert.equal(parsed.leases[0]!.acquiredAtMs, 1795331974189);
  });

  it("leaves numbers inside strings, fractions and exponents alone", () => {
    const text = '{"value":"id 9007199254740993 \\"x\\": 12345678901234567890","a":1.5e300,"b":-12345678901234567890}';
    assert.equal(
      quoteUnsafeIntegers(text),
      '{"value":"id 9007199254740993 \\"x\\": 12345678901234567890","a":1.5e300,"b":"-12345678901234567890"}',
    );
  });
});

describe("problem documents", () => {
  const problem = (slug: string, status: number, extra: object = {}) => ({
    type: `/problems/${slug}`,
    title: slug,
    status,
    ...extra,
  });

  it("map to an error by their slug, carrying the document", () => {
    const cases: [string, number, new (...args: never[]) => LockgateError][] = [
      ["lock-held", 409, LockHeldError],
      ["not-owner", 409, NotOwnerError],
      ["lock-not-found", 404, LockLostError],
      ["deadlock", 409, DeadlockError],
      ["session-not-found", 404, SessionNotFoundError],
      ["backend-unavailable", 503, GatewayUnavailableError],
      ["shutting-down", 503, GatewayUnavailableError],
      ["invalid-key", 422, InvalidRequestError],
      ["limit-mismatch", 409, InvalidRequestError],
      ["idempotency-key-reused", 422, InvalidRequestError],
      ["unauthorized", 401, InvalidRequestError],
    ];
    for (const [slug, status, kind] of cases) {
      const error = errorFromProblem(problem(slug, status));
      assert.ok(error instanceof kind, `${slug} is a ${kind.name}`);
      assert.ok(error instanceof LockgateError);
      assert.equal(error.slug, slug);
      assert.equal(error.problem?.status, status);
    }
  });

  it("give a lock-held error the holder's remaining lease", () => {
    const error = errorFromProblem(problem("lock-held", 409, { retry_after_ms: 1834 }));
    assert.ok(error instanceof LockHeldError);
    assert.equal(error.retryAfterMs, 1834);
  });

  it("give a deadlock error the cycle's keys, in order", () => {
    const error = errorFromProblem(problem("deadlock", 409, { key: "x", cycle: ["x", "y", "z"] }));
    assert.ok(error instanceof DeadlockError);
    assert.deepEqual(error.cycle, ["x", "y", "z"]);
    assert.deepEqual((errorFromProblem(problem("deadlock", 409)) as DeadlockError).cycle, [], "none named: empty");
  });

  it("make any other 5xx a GatewayUnavailableError", () => {
    assert.ok(errorFromProblem({ type: "about:blank", title: "Bad Gateway", status: 502 }) instanceof GatewayUnavailableError);
    assert.ok(errorFromProblem(problem("internal", 500)) instanceof GatewayUnavailableError);
    assert.ok(errorFromProblem(problem("invalid-key", 422)) instanceof InvalidRequestError);
  });
});
