// The console's modules (and the client's files it shares) loaded in Node
// for the unit tests, compiled by Vite's module runner: the same transform
// the build uses, imports and all. Only modules that touch no DOM when they
// load can be tested this way.

import path from "node:path";
import { fileURLToPath } from "node:url";
import { runnerImport } from "vite";

const consoleRoot = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Imports `<file>.ts`, a path relative to `console/` (`src/views/lock-state`). */
export async function importSource(file) {
  const { module } = await runnerImport(path.join(consoleRoot, `${file}.ts`), { configFile: false, logLevel: "error" });
  return module;
}
