// The console's types of the API against the repository's
// openapi/openapi.json: every field, enum value and problem slug they name
// must exist there with the same type. The check is the TypeScript
// client's (clients/typescript/test/openapi-contract.ts), which tests it.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { importSource } from "./modules.mjs";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const { contractViolations, problemSlugs } = await importSource("../clients/typescript/test/openapi-contract");

/** Which of the console's types stands for which part of the document. */
function bindings(document) {
  const gateway = "src/gateway.ts";
  const events = "src/lock-events.ts";
  return [
    { file: gateway, type: "Lease", schema: "LeaseEntry" },
    { file: gateway, type: "Waiter", schema: "WaiterEntry" },
    { file: gateway, type: "HeldLock", schema: "LockStatus" },
    { file: gateway, type: "FreeLock", schema: "FreeLock" },
    { file: gateway, type: "LockPage", schema: "LockList" },
    { file: gateway, type: "Sale", schema: "SaleView" },
    { file: gateway, type: "Formats", schema: "Formats" },
    { file: gateway, type: "Instance", schema: "InstanceView" },
    { file: gateway, type: "InstanceList", schema: "InstanceList" },
    { file: gateway, type: "GatewayVersion", schema: "VersionView" },
    { file: gateway, type: "Problem", schema: "Problem" },
    { file: gateway, type: "ProblemSlug", words: problemSlugs(document), from: "the document's problem slugs" },
    { file: events, type: "LockEventName", schema: "LockWatchEventName" },
    { file: events, type: "Acquired", schema: "AcquiredEvent" },
    { file: events, type: "ValueChanged", schema: "ValueEvent" },
    { file: events, type: "HolderLeft", schema: "EndedEvent" },
    { file: events, type: "Delayed", schema: "DelayedEvent" },
  ];
}

test("the console's types name only fields, enum values and problem slugs of openapi/openapi.json, with its types", () => {
  const document = JSON.parse(readFileSync(path.join(root, "..", "openapi", "openapi.json"), "utf8"));
  const config = ts.getParsedCommandLineOfConfigFile(path.join(root, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
  const program = ts.createProgram({ rootNames: config.fileNames, options: config.options });
  assert.deepEqual(contractViolations(ts, program, document, bindings(document), { wireName: (name) => name }), []);
});
