// Debian's Chromium driven by playwright-core (which downloads no browser),
// headless with a fresh profile; pages that record what went wrong in them
// (console errors, uncaught exceptions, requests to any other origin); axe
// accessibility checks and screenshots at the two sizes the console is made
// for.
//
// Every page runs the console of this checkout's dist/: the gateway answers
// /console and its two files (its own headers, its Content Security Policy
// among them), and the body is swapped for dist/'s bytes on the way in. A
// gateway built from this checkout embeds exactly those bytes (a test of
// console.test.mjs checks that), so the swap changes nothing then; with a
// gateway built before the last change of the console, the page tested is
// still the console as it is now.

import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { repo } from "./gateway.mjs";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const dist = path.join(repo, "console", "dist");
/** The console's routes, and the file of dist/ each serves. */
const CONSOLE_FILES = new Map([
  ["/console", "index.html"],
  ["/console/console.js", "console.js"],
  ["/console/console.css", "console.css"],
]);
export const screenshots = path.join(repo, ".run", "console");

export const SIZES = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
};

export class Browser {
  static async launch() {
    const profile = mkdtempSync(path.join(tmpdir(), "lockgate-console-chromium-"));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: chromiumPath,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
      viewport: SIZES.desktop,
    });
    // Every wait in these tests is for something that takes a second or two.
    context.setDefaultTimeout(10_000);
    mkdirSync(screenshots, { recursive: true });
    return new Browser(context, profile);
  }

  constructor(context, profile) {
    this.context = context;
    this.profile = profile;
  }

  /** A new tab on `url`, recording its errors and every request it makes. */
  async open(url, size = SIZES.desktop) {
    const page = await this.context.newPage();
    await page.setViewportSize(size);
    const { origin } = new URL(url);
    await page.route(
      (target) => target.origin === origin && CONSOLE_FILES.has(target.pathname),
      async (route) => {
        const response = await route.fetch();
        const file = CONSOLE_FILES.get(new URL(route.request().url()).pathname);
        await route.fulfill({ response, body: readFileSync(path.join(dist, file)) });
      },
    );
    const console = new PageRecord(page, origin);
    await page.goto(url);
    return { page, console };
  }

  async close() {
    await this.context.close();
    rmSync(this.profile, { recursive: true, force: true });
  }
}

/** What went wrong in one page. */
class PageRecord {
  constructor(page, origin) {
    this.errors = [];
    this.foreignRequests = [];
    page.on("console", (message) => {
      if (message.type() === "error") this.errors.push(message.text());
    });
    page.on("pageerror", (error) => this.errors.push(`uncaught: ${error.message}`));
    page.on("request", (request) => {
      const url = request.url();
      if (!url.startsWith(`${origin}/`) && !url.startsWith("data:")) this.foreignRequests.push(url);
    });
  }

  /** The errors, less those that `expected` matches (a refused request the test provoked). */
  unexpectedErrors(expected = []) {
    return this.errors.filter((text) => !expected.some((pattern) => pattern.test(text)));
  }
}

/** Chrome's own console line for a request that got no answer or an error status. */
export const FAILED_REQUEST = /^Failed to load resource/;

/** axe-core's serious and critical violations on the page as it is now. */
export async function seriousViolations(page) {
  // Evaluated through the DevTools protocol, which the page's Content
  // Security Policy does not govern: a <script> tag would be refused.
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(axeSource);
  const results = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  return results.violations
    .filter((violation) => violation.impact === "serious" || violation.impact === "critical")
    .map((violation) => `${violation.id} (${violation.impact}): ${violation.help} at ${violation.nodes.map((node) => node.target.join(" ")).join(", ")}`);
}

/**
 * At each size: no serious or critical axe violation, and a screenshot
 * `<name>-<size>.png`. `settle` runs after each resize (a chart redraws).
 */
export async function inspectAtBothSizes(page, name, assert, settle = () => page.waitForTimeout(300)) {
  for (const [size, viewport] of Object.entries(SIZES)) {
    await page.setViewportSize(viewport);
    await settle();
    assert.deepEqual(await seriousViolations(page), [], `axe on ${name} at ${size}`);
    await page.screenshot({ path: path.join(screenshots, `${name}-${size}.png`), fullPage: true });
  }
  await page.setViewportSize(SIZES.desktop);
}

/** Types the admin token into the page's form, as a person would. */
export async function typeAdminToken(page, token) {
  await page.getByLabel("Admin token", { exact: true }).fill(token);
  await page.getByRole("button", { name: "Use" }).click();
  await page.getByText("Admin token set for this tab.").waitFor();
}
