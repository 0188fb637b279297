// The built console is checked in (the gateway embeds it, so building the
// gateway needs no Node): a fresh build of the sources must give exactly
// the three checked-in files, byte for byte, and the sources must
// type-check.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => path.join(root, "node_modules", ".bin", name);
const FILES = ["console.css", "console.js", "index.html"];

test("dist/ holds exactly the three files a fresh build makes, byte for byte", () => {
  const out = mkdtempSync(path.join(tmpdir(), "lockgate-console-build-"));
  try {
    execFileSync(bin("vite"), ["build", "--outDir", out, "--emptyOutDir", "--logLevel", "error"], { cwd: root, stdio: "pipe" });
    assert.deepEqual(readdirSync(out).sort(), FILES, "a build makes these files and no others");
    assert.deepEqual(readdirSync(path.join(root, "dist")).sort(), FILES, "dist/ holds these files and no others");
    for (const file of FILES) {
      const fresh = readFileSync(path.join(out, file));
      const checkedIn = readFileSync(path.join(root, "dist", file));
      assert.ok(fresh.equals(checkedIn), `dist/${file} differs from a fresh build: run npm run build in console/ and commit dist/`);
    }
    const html = readFileSync(path.join(root, "dist", "index.html"), "utf8");
    assert.match(html, /<script type="module" crossorigin src="\/console\/console\.js"><\/script>/);
    assert.match(html, /<link rel="stylesheet" crossorigin href="\/console\/console\.css">/);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("the sources type-check", () => {
  execFileSync(bin("tsc"), ["--noEmit", "-p", root], { cwd: root, stdio: "pipe" });
});
