/**
 * The client's types against the API's contract, the repository's
 * `openapi/openapi.json`: every field, enum value and problem slug they name
 * must exist there with the same type. And the check itself, on a small
 * document, finds each kind of drift.
 */

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

import {
  type Binding,
  contractViolations,
  documentedWords,
  type OpenApiDocument,
  problemSlugs,
  snakeCase,
} from "./openapi-contract.js";

/** The package's root: this file runs from `build/`. */
const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const openapi = join(packageRoot, "..", "..", "openapi", "openapi.json");

/** Which of the client's types stands for which part of the document. */
function clientBindings(document: OpenApiDocument): Binding[] {
  const types = "src/types.ts";
  return [
    { file: types, type: "LockMode", schema: "LockModeText" },
    { file: types, type: "Grant", schema: "LockGrant" },
    { file: types, type: "LeaseState", schema: "LeaseRenewal" },
    { file: types, type: "LeaseView", schema: "LeaseEntry" },
    { file: types, type: "Waiter", schema: "WaiterEntry" },
    { file: types, type: "LockStatus", schema: "LockStatus" },
    { file: types, type: "FreeLock", schema: "FreeLock" },
    { file: types, type: "LockPage", schema: "LockList" },
    { file: types, type: "HoldsLeft", schema: "HoldReleased" },
    { file: types, type: "LockStreamEventName", schema: "LockStreamEventName" },
    { file: types, type: "QueuedData", schema: "QueuedEvent" },
    { file: types, type: "RenewedData", schema: "RenewedEvent" },
    { file: types, type: "LostData", schema: "LostEvent" },
    { file: types, type: "ReleasedData", schema: "ReleasedEvent" },
    { file: types, type: "AcquireBody", schema: "AcquireBody", sent: true },
    { file: types, type: "ExtendBody", schema: "ExtendBody", sent: true },
    { file: types, type: "ValueBody", schema: "ValueBody", sent: true },
    { file: types, type: "BatchBody", schema: "BatchBody", sent: true },
    { file: types, type: "BatchLockBody", schema: "BatchLockBody", sent: true },
    { file: types, type: "BatchGrant", schema: "BatchGrant" },
    { file: types, type: "BatchGrantLock", schema: "BatchGrantLock" },
    { file: types, type: "SessionBody", schema: "SessionBody", sent: true },
    { file: types, type: "SessionGrant", schema: "SessionGrant" },
    { file: types, type: "SessionRenewedData", schema: "SessionRenewedEvent" },
    { file: types, type: "SessionEndedData", schema: "SessionEndedEvent" },
    {
      file: types,
      type: "SessionEndReason",
      words: documentedWords(document, "SessionEndedEvent", "reason"),
      from: "the reasons SessionEndedEvent documents",
    },
    { file: "src/watch.ts", type: "WatchEventName", schema: "LockWatchEventName" },
    { file: "src/watch.ts", type: "AcquiredData", schema: "AcquiredEvent" },
    { file: "src/watch.ts", type: "ValueData", schema: "ValueEvent" },
    { file: "src/watch.ts", type: "EndedData", schema: "EndedEvent" },
    { file: "src/watch.ts", type: "DelayedData", schema: "DelayedEvent" },
    { file: "src/errors.ts", type: "Problem", schema: "Problem" },
    { file: "src/errors.ts", type: "ProblemSlug", words: problemSlugs(document), from: "the document's problem slugs" },
    {
      file: "src/hold.ts",
      type: "GatewayLossReason",
      words: documentedWords(document, "LostEvent", "reason"),
      from: "the reasons LostEvent documents",
    },
  ];
}

/**
 * What the client names that the gateway sends and its prose documents
 * (`docs/using.md`) but the document does not yet: each is a violation the
 * check finds, let through here by its exact text. The second test fails
 * once the document has it, so that the entry goes.
 */
const UNDOCUMENTED: { violation: string; why: string }[] = [];

/** A program of the files `tsconfig` names, type-checked as the build does. */
function programOf(tsconfig: string): ts.Program {
  const parsed = ts.getParsedCommandLineOfConfigFile(tsconfig, {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
  if (!parsed) throw new Error(`cannot read ${tsconfig}`);
  return ts.createProgram({ rootNames: parsed.fileNames, options: { ...parsed.options, noEmit: true } });
}

describe("the client's types", () => {
  const document = JSON.parse(readFileSync(openapi, "utf8")) as OpenApiDocument;
  const program = programOf(join(packageRoot, "tsconfig.json"));
  const violations = contractViolations(ts, program, document, clientBindings(document), { wireName: snakeCase });
  const known = new Set(UNDOCUMENTED.map((gap) => gap.violation));

  it("name only fields, enum values and problem slugs of openapi/openapi.json, with its types", () => {
    assert.deepEqual(
      violations.filter((violation) => !known.has(violation)),
      [],
    );
  });

  it("name what the document still lacks only where the list of undocumented names says so", () => {
    const fixed = UNDOCUMENTED.filter((gap) => !violations.includes(gap.violation));
    assert.deepEqual(fixed, [], "the document has these now: take them off UNDOCUMENTED");
  });
});

describe("the contract check", () => {
  const document: OpenApiDocument = {
    paths: { "/locks": { post: { responses: { "409": { description: "`lock-held`: There was no place." } } } } },
    components: {
      schemas: {
        Lock: {
          type: "object",
          required: ["key", "fencing_token", "value"],
          properties: {
            key: { type: "string" },
            fencing_token: { type: "integer" },
            ttl_ms: { type: "integer" },
            value: { type: ["string", "null"] },
            mode: { $ref: "#/components/schemas/Mode" },
            leases: { type: "array", items: { $ref: "#/components/schemas/Lease" } },
          },
        },
        Lease: { type: "object", required: ["holds"], properties: { holds: { type: "integer" } } },
        Mode: { type: "string", enum: ["exclusive", "shared"] },
      },
    },
  };

  // Each program reuses the last one's parsed standard library.
  let previous: ts.Program | undefined;

  /** The violations the check finds in `source`, each of its types bound to `Lock` (or to the slugs). */
  function violationsOf(source: string): string[] {
    const dir = mkdtempSync(join(tmpdir(), "lockgate-contract-"));
    try {
      const file = join(dir, "types.ts");
      writeFileSync(file, source);
      const options = { strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, lib: ["lib.es2020.d.ts"], types: [] };
      const program = ts.createProgram([file], options, undefined, previous);
      previous = program;
      const bindings: Binding[] = [...source.matchAll(/^\s*export (?:interface|type) (\w+)/gm)].map(([, type]) =>
        type === "Slug"
          ? { file: "types.ts", type, words: problemSlugs(document), from: "the slugs" }
          : { file: "types.ts", type: type!, schema: type === "Mode" ? "Mode" : "Lock" },
      );
      return contractViolations(ts, program, document, bindings, { wireName: snakeCase });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it("accepts types that agree with the document", () => {
    const source = `
      export interface Agrees { key: string; fencingToken: bigint; value: string | null; mode?: "exclusive"; leases?: { holds: number }[] }
      export type Mode = "shared";
      export type Slug = "lock-held";`;
    assert.deepEqual(violationsOf(source), []);
  });

  it("finds a field, an enum value or a slug the document lacks, and a field of another type", () => {
    const violations = violationsOf(`
      export interface Renamed { key: string; fencingToken: bigint; value: string | null; expiresAt: number }
      export interface Retyped { key: number; fencingToken: bigint; value: string | null }
      export interface Nested { key: string; fencingToken: bigint; value: string | null; leases?: { holds: string }[] }
      export interface NotBigint { key: string; fencingToken: bigint; value: string | null; ttlMs?: bigint }
      export interface NeverNull { key: string; fencingToken: bigint; value: string }
      export type Mode = "exclusive" | "sideways";
      export type Slug = "lock-held" | "lock-stolen";`);
    const expected = [
      /^Renamed\.expiresAt: the document has no field expires_at/,
      /^Retyped\.key: number, but the document has string/,
      /^Nested\.leases\[\]\.holds: string, but the document has number/,
      /^NotBigint\.ttlMs: bigint, but only fencing_token/,
      /^NeverNull\.value: the document allows null here/,
      /^Mode: "sideways" is not one of "exclusive", "shared"/,
      /^Slug: "lock-stolen" is not among the slugs/,
    ];
    for (const pattern of expected) assert.ok(violations.some((v) => pattern.test(v)), `${pattern} in ${violations.join("\n")}`);
    assert.equal(violations.length, expected.length, violations.join("\n"));
  });
});
