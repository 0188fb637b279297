// The console's pure modules (no DOM), compiled from TypeScript for Node's
// test runner with the same TypeScript the build uses.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";

const src = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src");

/** Imports `src/<name>.ts`, which must import nothing. */
export async function importSource(name) {
  const source = readFileSync(path.join(src, `${name}.ts`), "utf8");
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const dir = mkdtempSync(path.join(tmpdir(), "lockgate-console-module-"));
  const file = path.join(dir, `${name}.mjs`);
  writeFileSync(file, outputText);
  try {
    return await import(pathToFileURL(file).href);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
