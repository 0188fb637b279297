// The console in a real browser against the real gateway: a lock taken over
// HTTP shows up and goes, waiters show in order, revoking one holder from the
// page ends that hold only, a session's lock shows its session and, once the
// session expires, its lock-delay counting down, a bought-out sale charts its stock to 0 with its
// refusals counted, two gateways on one Redis are listed as the fleet's
// instances, the page rides out a gateway restart, and the admin token opens
// what needs it. Every view is checked with axe and saved as a
// screenshot at 1280x800 and 390x844; no page may log an error it did not
// provoke, nor ask any origin but the gateway's.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, afterEach, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Browser, FAILED_REQUEST, inspectAtBothSizes, SIZES, typeAdminToken } from "./browser.mjs";
import { buyOut } from "./buyers.mjs";
import { eventually, Lockgate, RedisServer } from "./gateway.mjs";

const dist = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist");
const ADMIN_TOKEN = "console-test-admin-token";

describe("the console", () => {
  let redis;
  let gateway;
  let browser;
  const opened = [];

  before(async () => {
    redis = await RedisServer.start();
    gateway = await Lockgate.start(redis, {
      adminToken: ADMIN_TOKEN,
      args: [
        // A low per-user rate, so that one eager buyer is refused for it.
        "--seckill-rate",
        "5",
        "--seckill-burst",
        "5",
        // An order hand-off, so that the sales show stored and pending.
        "--orders-database",
        `sqlite://${path.join(redis.dir, "orders.db")}`,
      ],
    });
    browser = await Browser.launch();
  });

  after(async () => {
    await browser?.close();
    await gateway?.stop();
    await redis?.stop();
  });

  // Every page a test opened is closed when it ends, pass or fail, and
  // may have logged no error it did not provoke nor asked another origin.
  afterEach(async () => {
    const pages = opened.splice(0);
    for (const { page } of pages) await page.close();
    for (const { console, expectedErrors } of pages) {
      assert.deepEqual(console.unexpectedErrors(expectedErrors), [], "errors in the browser's console");
      assert.deepEqual(console.foreignRequests, [], "requests to other origins");
    }
  });

  /**
   * Closes the pages this test opened (their consoles are still checked when
   * it ends), so that the locks it cleans up afterwards are not read by a page
   * at the moment they are freed: a read answered 404 `lock-not-found` is
   * handled, but the browser still logs it as a failed request.
   */
  async function closePages() {
    for (const { page } of opened) await page.close();
  }

  /** Opens a view of `on` (the gateway by default) in a new tab. */
  async function open(route, { size = SIZES.desktop, expectedErrors = [], on = gateway } = {}) {
    const tab = await browser.open(`${on.url}/console${route}`, size);
    opened.push({ ...tab, expectedErrors });
    return tab.page;
  }

  test("the gateway serves the built console at /console, its script and its style", async () => {
    for (const [route, file, type] of [
      ["/console", "index.html", "text/html"],
      ["/console/console.js", "console.js", "javascript"],
      ["/console/console.css", "console.css", "text/css"],
    ]) {
      const response = await gateway.request(route);
      assert.equal(response.status, 200, route);
      assert.match(response.headers.get("content-type") ?? "", new RegExp(type), route);
      assert.ok(Buffer.from(await response.arrayBuffer()).equals(readFileSync(path.join(dist, file))), `${route} is dist/${file}`);
    }
  });

  test("a lock taken over HTTP appears within a second, with its exact fencing token, and goes when released", async () => {
    const page = await open("#/locks?prefix=appear:");
    await page.getByText("No held lock starting with “appear:”").waitFor();

    const grant = await gateway.acquire({ key: "appear:1", ttl_ms: 60_000, value: "10.0.0.7:9000" });
    const card = page.locator('[data-key="appear:1"]');
    await card.waitFor({ timeout: 1000 });
    assert.equal(await card.locator(".fence .token").textContent(), String(grant.fencing_token));
    await card.getByText("10.0.0.7:9000").waitFor();
    const left = await card.locator(".left-text").textContent();
    assert.match(left, /^\d+\.\d s left$/);

    await gateway.acquire({ key: "appear:2", ttl_ms: 30_000, mode: "shared" });
    await page.locator('[data-key="appear:2"]').waitFor({ timeout: 1000 });
    await inspectAtBothSizes(page, "locks", assert);

    // A keyboard user's focus stays on a lock's link through the re-reads.
    await card.getByRole("link", { name: "appear:1" }).focus();
    await page.waitForTimeout(1200);
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "appear:1");

    await gateway.release("appear:1", grant.token);
    await card.waitFor({ state: "detached", timeout: 1000 });

    // Enter on a lock's link opens its page, with the focus on its heading.
    await page.getByRole("link", { name: "appear:2" }).focus();
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { level: 1, name: "appear:2" }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.tagName), "H1");
    await page.locator('.timeline [data-event="snapshot"]').waitFor();
  });

  test("a counting lock shows each holder's permits and the places taken; a batch's locks show its one session on each", async () => {
    const page = await open("#/locks?prefix=pool:");
    await page.getByText("No held lock starting with “pool:”").waitFor();
    const big = await gateway.acquire({ key: "pool:gpu", limit: 5, permits: 3, ttl_ms: 60_000 });
    const small = await gateway.acquire({ key: "pool:gpu", limit: 5, permits: 2, ttl_ms: 60_000 });
    const card = page.locator('[data-key="pool:gpu"]');
    await card.locator(`.lease[data-fencing-token="${big.fencing_token}"] .permits`).getByText("3 permits", { exact: true }).waitFor();
    await card.locator(`.lease[data-fencing-token="${small.fencing_token}"] .permits`).getByText("2 permits", { exact: true }).waitFor();
    await card.locator(".places").getByText("5 of 5 places taken", { exact: true }).waitFor();
    await gateway.release("pool:gpu", small.token);
    await card.locator(".places").getByText("3 of 5 places taken", { exact: true }).waitFor({ timeout: 2000 });
    await gateway.release("pool:gpu", big.token);

    // Several locks at once in one session: each lock's holder shows the same session handle.
    const session = await gateway.openSession({ ttl_ms: 30_000 });
    const response = await gateway.request("/locks/batch", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ locks: [{ key: "pool:a" }, { key: "pool:b", limit: 3, permits: 2 }], session: session.id }),
    });
    assert.equal(response.status, 201, await response.clone().text());
    const handle = (await gateway.inspect("pool:a")).leases[0].session;
    for (const key of ["pool:a", "pool:b"]) {
      await page.locator(`[data-key="${key}"] .session .handle`).getByText(handle, { exact: true }).waitFor();
    }
    await page.locator('[data-key="pool:b"] .permits').getByText("2 permits", { exact: true }).waitFor();
    await inspectAtBothSizes(page, "permits-and-batch", assert);
    await gateway.request(`/sessions/${session.id}`, { method: "DELETE" });
  });

  test("waiters appear in the order they will be served", async () => {
    const holder = await gateway.acquire({ key: "queue:1", ttl_ms: 60_000, value: "first-in-line" });
    const waiting = new AbortController();
    const waiters = [
      { key: "queue:1", wait_ms: 30_000, value: "writer" },
      { key: "queue:1", wait_ms: 30_000, mode: "shared", value: "reader" },
    ];
    const requests = [];
    for (const [index, body] of waiters.entries()) {
      requests.push(gateway.acquire(body, { signal: waiting.signal }).catch(() => null));
      await eventually(async () => (await gateway.inspect("queue:1"))?.waiters?.length === index + 1, { what: `waiter ${index + 1} queued` });
    }

    const page = await open(`#/locks/${encodeURIComponent("queue:1")}`);
    const rows = page.locator(".waiters .waiter");
    await eventually(async () => (await rows.count()) === 2, { what: "two waiters shown" });
    assert.deepEqual(await rows.locator(".position").allTextContents(), ["1.", "2."]);
    assert.deepEqual(await rows.locator(".mode").allTextContents(), ["exclusive", "shared"]);
    await page.getByText(String(holder.fencing_token)).first().waitFor();
    await page.locator('.timeline [data-event="snapshot"]').waitFor();

    // The first waiter is served when the holder leaves: the page follows.
    await gateway.release("queue:1", holder.token);
    await page.locator('.timeline [data-event="released"]').waitFor();
    await page.locator('.timeline [data-event="acquired"]').waitFor();
    await eventually(async () => (await rows.count()) === 1, { what: "one waiter left" });
    assert.deepEqual(await rows.locator(".mode").allTextContents(), ["shared"]);
    await inspectAtBothSizes(page, "lock", assert);

    await closePages();
    waiting.abort();
    for (const grant of await Promise.all(requests)) if (grant) await gateway.release("queue:1", grant.token);
  });

  test("revoking a holder from the page ends that hold only, with lost (revoked), and the other holder keeps it", async () => {
    const body = { key: "revoke:1", ttl_ms: 3000, limit: 2 };
    const kept = await gateway.holdStreamed({ ...body, value: "batch-7" });
    const revoked = await gateway.holdStreamed({ ...body, value: "batch-8" });
    const tokenOf = async (holder) =>
      (await eventually(() => holder.events.find((event) => event.event === "acquired"), { what: "acquired" })).data.fencing_token;
    const [keptToken, revokedToken] = [await tokenOf(kept), await tokenOf(revoked)];

    const page = await open(`#/locks/${encodeURIComponent("revoke:1")}`);
    const revoke = page.getByRole("button", { name: `Revoke #${revokedToken}…`, exact: true });
    await revoke.waitFor();
    assert.equal(await revoke.isDisabled(), true, "no revocation without the admin token");
    await typeAdminToken(page, ADMIN_TOKEN);
    await page.getByText("batch-8").first().waitFor();

    await revoke.click();
    const dialog = page.getByRole("dialog", { name: `Revoke hold #${revokedToken} of revoke:1?` });
    await dialog.waitFor();
    // Cancelling does nothing.
    await dialog.getByRole("button", { name: "Cancel" }).click();
    await dialog.waitFor({ state: "hidden" });
    assert.ok(!revoked.events.some((event) => event.event === "lost"));

    await revoke.click();
    await inspectAtBothSizes(page, "revoke-dialog", assert);
    await dialog.getByRole("button", { name: "Revoke", exact: true }).click();
    const events = await revoked.ended;
    assert.deepEqual(events.at(-1), { event: "lost", data: { reason: "revoked", key: "revoke:1" } });
    await page.getByText(`Revoked #${revokedToken} at `).waitFor();
    await page.locator('.timeline [data-event="revoked"]').getByText(`#${revokedToken} was revoked`).waitFor();

    // Only that hold ended: the other holder still holds its place, on the gateway and on the page.
    const status = await gateway.inspect("revoke:1");
    assert.deepEqual(status.leases.map((lease) => lease.fencing_token), [keptToken]);
    assert.ok(!kept.events.some((event) => event.event === "lost"), "the other holder lost nothing");
    await page.getByText("Held, counting, up to 2: 1 holder, nobody waiting.").waitFor();
    await page.getByRole("button", { name: `Revoke #${revokedToken}…`, exact: true }).waitFor({ state: "detached" });
    // The remaining holder's button keeps the keyboard focus through the re-reads and renewals.
    const keptButton = page.getByRole("button", { name: `Revoke #${keptToken}…`, exact: true });
    assert.equal(await keptButton.isEnabled(), true);
    await keptButton.focus();
    await page.waitForTimeout(2500);
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), `Revoke #${keptToken}…`);
    kept.close();
    await page.getByText("Free: nobody holds it.").waitFor();
  });

  test("a session's lock shows the session's handle; when the session expires, its lock-delay shows and counts down", async () => {
    const key = "delay:1";
    // A session nobody keeps alive: it expires after its lease, and its lock stays unavailable for the delay.
    const session = await gateway.openSession({ ttl_ms: 3000, lock_delay_ms: 8000 });
    const grant = await gateway.acquire({ key, session: session.id, value: "worker-7" });
    const handle = (await gateway.inspect(key)).leases[0].session;
    assert.match(handle, /^[0-9a-f]{32}$/);

    const page = await open(`#/locks/${encodeURIComponent(key)}`);
    const holder = page.locator(`.lease[data-fencing-token="${grant.fencing_token}"]`);
    await holder.locator(".session .handle").getByText(handle, { exact: true }).waitFor();
    assert.ok(!(await page.content()).includes(session.id), "the session's secret id is nowhere on the page");

    await page.locator('.timeline [data-event="expired"]').waitFor({ timeout: 8000 });
    const delayed = page.locator('.timeline [data-event="delayed"]');
    await delayed.getByText(/^Nobody is granted it until \d\d:\d\d:\d\d\.\d{3}: the lock-delay of a session that held it\.$/).waitFor();
    await page.locator(".lock-state").getByText(/^Free, delayed until \d\d:\d\d:\d\d\.\d{3}\.$/).waitFor();
    const notice = page.locator(".notice.delay");
    await notice.waitFor();
    const until = await notice.locator("time").textContent();
    assert.match(await page.locator(".lock-state").textContent(), new RegExp(`until ${until.replaceAll(".", "\\.")}`));

    // A page opened during the delay learns it from its snapshot.
    const later = await open(`#/locks/${encodeURIComponent(key)}`);
    await later.locator(".notice.delay").waitFor();
    await later.locator('.timeline [data-event="snapshot"]').getByText(`Free, delayed until ${until}, nobody waiting.`).waitFor();

    const left = notice.locator(".delay-left");
    const first = Number(/^([\d.]+) s left$/.exec(await left.textContent())?.[1]);
    await page.waitForTimeout(500);
    const second = Number(/^([\d.]+) s left$/.exec(await left.textContent())?.[1]);
    assert.ok(first > 0 && first <= 8 && second < first, `counts down: ${first}, then ${second}`);
    await inspectAtBothSizes(page, "lock-delay", assert);

    // Once the delay is over, the lock is plainly free, and can be taken.
    await page.getByText("Free: nobody holds it.").waitFor({ timeout: 15_000 });
    assert.equal(await notice.isHidden(), true);
    const next = await gateway.acquire({ key, ttl_ms: 30_000 });
    await page.locator('.timeline [data-event="acquired"]').getByText(`#${next.fencing_token}`).waitFor();
    await closePages();
    await gateway.release(key, next.token);
  });

  test("a sale bought out by a crowd shows its stock reaching 0 on the chart and its refusals counted", async () => {
    const reset = await gateway.request("/seckill/flash", {
      method: "PUT",
      admin: true,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ stock: 60, per_user_limit: 2, segments: 3 }),
    });
    assert.equal(reset.status, 200, await reset.text());

    const page = await open("#/sales");
    await page.getByText("enter the admin token at the top of the page to see them").waitFor();
    await typeAdminToken(page, ADMIN_TOKEN);
    const card = page.locator('[data-sku="flash"]');
    const figure = (name) => card.locator(`[data-figure="${name}"]`);
    await eventually(async () => (await figure("stock").textContent()) === "60", { what: "the full stock shown" });
    // One sale, whatever its segments: the figures are the whole sale's.
    assert.equal(await figure("segments").textContent(), "3");
    // A few readings before the rush, so that the chart shows the stock standing first.
    await page.waitForTimeout(1500);

    const statuses = await buyOut(gateway, "flash");
    assert.equal(statuses[201], 60, JSON.stringify(statuses));
    const sale = await (await gateway.request("/seckill/flash", { admin: true })).json();
    assert.equal(sale.stock, 0);
    for (const reason of ["sold_out", "limit_exceeded", "rate_limited"]) {
      assert.ok(sale.refused[reason] > 0, `some purchases refused as ${reason}: ${JSON.stringify(sale)}`);
    }

    await eventually(async () => (await figure("stock").textContent()) === "0", { what: "stock 0 shown", timeoutMs: 2000 });
    await card.locator(".chip.sold-out").getByText("Sold out").waitFor();
    assert.equal(await figure("sold").textContent(), "60");
    for (const reason of ["sold_out", "limit_exceeded", "rate_limited"]) {
      await eventually(async () => (await figure(reason).textContent()) === String(sale.refused[reason]), {
        what: `${reason} counted as the gateway counts it`,
        timeoutMs: 2000,
      });
    }
    // The hand-off stores every order; none is left pending.
    await eventually(async () => (await figure("stored").textContent()) === "60", { what: "60 orders stored", timeoutMs: 5000 });
    assert.equal(await figure("pending").textContent(), "0");
    const summary = await card.locator(".chart-summary").textContent();
    assert.match(summary, /Stock went from 60 to 0/);
    const peak = Number(/orders peak ([\d.]+)\/s/.exec(summary)?.[1]);
    assert.ok(peak > 0, summary);
    assert.equal(await card.locator("canvas").count(), 1, "the chart is drawn");
    // The legend's checkboxes hide and show a series.
    const stockSeries = card.getByRole("checkbox", { name: /Stock/ });
    await stockSeries.uncheck();
    await stockSeries.check();

    await inspectAtBothSizes(page, "sales", assert, () => page.waitForTimeout(600));
  });

  test("the instances view shows the format in use and, with the admin token, both gateways on one Redis", async () => {
    const second = await Lockgate.start(redis, { adminToken: ADMIN_TOKEN });
    try {
      const ids = [gateway, second].map((one) => `console-test-${one.port}`);
      const page = await open("#/instances", { on: second, expectedErrors: [FAILED_REQUEST] });
      await page.getByRole("heading", { level: 1, name: "Instances" }).waitFor();
      // /version needs no token: the version and the format in use show at once.
      await page.locator('[data-figure="version"]').getByText("0.2.0", { exact: true }).waitFor();
      await page.locator('[data-figure="format-in-use"]').getByText("format 2", { exact: true }).waitFor();
      await page.locator('[data-figure="answered-by"]').getByText(ids[1], { exact: true }).waitFor();
      await page.getByText("enter the admin token at the top of the page to see it").waitFor();
      assert.equal(await page.getByRole("table").count(), 0, "no list without the token");

      await typeAdminToken(page, "not-the-token");
      await page.getByText("403 Forbidden").waitFor();
      await page.getByRole("button", { name: "Forget" }).click();

      await typeAdminToken(page, ADMIN_TOKEN);
      const table = page.getByRole("table", { name: "Live instances, oldest first" });
      for (const id of ids) {
        const row = table.getByRole("row").filter({ has: page.getByRole("rowheader", { name: id, exact: true }) });
        await row.waitFor({ timeout: 5000 });
        assert.equal(await row.locator('[data-field="version"]').textContent(), "0.2.0");
        assert.equal(await row.locator('[data-field="reads"]').textContent(), "1, 2");
        assert.equal(await row.locator('[data-field="writes"]').textContent(), "2");
        assert.match(await row.locator('[data-field="started"]').textContent(), /^(just now|\d+ s ago|\d+ min \d\d s ago) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
      }
      assert.equal(await page.locator(`[data-instance="${ids[1]}"] [data-field="address"]`).textContent(), `127.0.0.1:${second.port}`);
      assert.equal(await page.locator(".problem").count(), 0);
      await inspectAtBothSizes(page, "instances", assert);
    } finally {
      await closePages();
      await second.stop();
    }
  });

  test("a page that loses the gateway says so and recovers by itself when it is back", async () => {
    const watched = "restart:1";
    const list = await open("#/locks?prefix=restart:", { expectedErrors: [FAILED_REQUEST] });
    const lockPage = await open(`#/locks/${encodeURIComponent(watched)}`, { expectedErrors: [FAILED_REQUEST] });
    await lockPage.locator('.timeline [data-event="snapshot"]').waitFor();
    await list.locator('.link[data-state="live"]').waitFor();

    await gateway.kill();
    for (const page of [list, lockPage]) {
      await page.locator('.link[data-state="lost"]').getByText(/Lost the gateway/).waitFor({ timeout: 5000 });
    }
    await inspectAtBothSizes(list, "lost", assert);

    await gateway.run();
    for (const page of [list, lockPage]) {
      await page.locator('.link[data-state="live"]').waitFor({ timeout: 10_000 });
    }
    // Both read again: the list shows a new lock, the event stream (resumed) its grant.
    const grant = await gateway.acquire({ key: watched, ttl_ms: 30_000 });
    // A tick after a slow read waits up to three times that read (poll.ts),
    // and the first reads after the restart can be slow on a busy machine.
    await list.locator(`[data-key="${watched}"]`).waitFor({ timeout: 5000 });
    await lockPage.locator('.timeline [data-event="acquired"]').getByText(`#${grant.fencing_token}`).waitFor({ timeout: 10_000 });
    await closePages();
    await gateway.release(watched, grant.token);
  });

  test("with API keys on the lock routes, the admin token typed once opens them, and a missing or wrong one is said so", async () => {
    const guarded = await Lockgate.start(redis, { adminToken: ADMIN_TOKEN, args: ["--api-keys", "console-test-api-key"] });
    try {
      const page = await open("#/locks?prefix=guarded:", { on: guarded, expectedErrors: [FAILED_REQUEST] });
      await page.getByText("401 Unauthorized").waitFor();
      await page.getByText("Enter the admin token at the top of the page.").waitFor();

      await typeAdminToken(page, "not-the-token");
      await page.getByText("403 Forbidden").waitFor();
      await page.getByRole("button", { name: "Forget" }).click();

      await typeAdminToken(page, ADMIN_TOKEN);
      await page.getByText("No held lock starting with “guarded:”").waitFor();
      assert.equal(await page.locator(".problem").count(), 0);

      // Kept for the tab only: not in the URL, not in localStorage or cookies.
      assert.doesNotMatch(page.url(), new RegExp(ADMIN_TOKEN));
      assert.equal(await page.evaluate(() => sessionStorage.getItem("lockgate.admin-token")), ADMIN_TOKEN);
      assert.equal(await page.evaluate(() => localStorage.length), 0);
      assert.deepEqual(await browser.context.cookies(), []);
      // A new tab starts without it.
      const other = await browser.open(`${guarded.url}/console#/locks`);
      opened.push({ ...other, expectedErrors: [FAILED_REQUEST] });
      await other.page.getByText("401 Unauthorized").waitFor();
    } finally {
        await guarded.stop();
    }
  });
});
