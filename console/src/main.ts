/**
 * The lockgate console: the page the gateway serves at `/console`.
 *
 * It reads only the gateway's public HTTP API, from the origin it was
 * served from, so it works offline and behind nginx alike. Four views,
 * chosen by the URL's fragment (the gateway serves one page):
 *   #/locks[?prefix=P]  the held locks (views/lock-list.ts)
 *   #/locks/<key>       one lock, its events, revocation (views/lock-page.ts)
 *   #/sales             the flash sales (views/sales.ts)
 *   #/instances         the data format in use, the live instances (views/instances.ts)
 */

import "./styles.css";
import { AdminToken } from "./admin-token";
import type { Context, View } from "./context";
import { h, icon, ICONS, replaceChildren, setText } from "./dom";
import * as format from "./format";
import { Gateway } from "./gateway";
import { Backoff, Link, type LinkState, sleep } from "./link";
import { ServerClock } from "./server-clock";
import { instancesView } from "./views/instances";
import { lockListView } from "./views/lock-list";
import { lockPageView } from "./views/lock-page";
import { salesView } from "./views/sales";

interface Route {
  name: "locks" | "lock" | "sales" | "instances";
  view: View;
  title: string;
}

/** The view a fragment names; anything else is the list of locks. */
function route(hash: string): Route {
  const [path = "", query = ""] = hash.replace(/^#/, "").split("?");
  if (path === "/sales") return { name: "sales", view: salesView, title: "Sales" };
  if (path === "/instances") return { name: "instances", view: instancesView, title: "Instances" };
  const lock = /^\/locks\/(.+)$/.exec(path);
  if (lock?.[1]) {
    const key = decodeURIComponent(lock[1]);
    return { name: "lock", view: lockPageView(key), title: key };
  }
  const prefix = new URLSearchParams(query).get("prefix") ?? "";
  return { name: "locks", view: lockListView(prefix), title: "Locks" };
}

function start(app: HTMLElement): void {
  const token = new AdminToken();
  const link = new Link();
  const context: Context = { gateway: new Gateway(token, link), token, link, clock: new ServerClock() };

  const nav = h(
    "nav",
    { class: "views", "aria-label": "Views" },
    h("a", { href: "#/locks", "data-view": "locks" }, icon(ICONS.lock), "Locks"),
    h("a", { href: "#/sales", "data-view": "sales" }, icon(ICONS.sale), "Sales"),
    h("a", { href: "#/instances", "data-view": "instances" }, icon(ICONS.server), "Instances"),
  );
  const status = linkStatus(link);
  const main = h("main", { id: "main" });
  replaceChildren(
    app,
    h("a", { class: "skip", href: "#main" }, "Skip to the content"),
    h(
      "header",
      { class: "top" },
      h("p", { class: "brand" }, icon(ICONS.lock, "icon brand-icon"), "lockgate ", h("span", {}, "console")),
      nav,
      tokenForm(token),
      status,
    ),
    main,
  );
  // The skip link moves focus without touching the fragment, which routes.
  app.querySelector<HTMLAnchorElement>(".skip")?.addEventListener("click", (event) => {
    event.preventDefault();
    main.querySelector<HTMLElement>("h1")?.focus();
  });

  let current: AbortController | null = null;
  // A view's own edits of the fragment (a new prefix) use replaceState,
  // which fires no hashchange: the view stays and keeps its state.
  const show = (moveFocus: boolean) => {
    current?.abort();
    current = new AbortController();
    const next = route(location.hash);
    document.title = `${next.title} · lockgate console`;
    for (const item of nav.querySelectorAll<HTMLAnchorElement>("a")) {
      const here = item.dataset.view === (next.name === "lock" ? "locks" : next.name);
      if (here) item.setAttribute("aria-current", "page");
      else item.removeAttribute("aria-current");
    }
    next.view(main, context, current.signal);
    if (moveFocus) main.querySelector<HTMLElement>("h1")?.focus();
  };
  window.addEventListener("hashchange", () => show(true));
  show(false);
  watchForRecovery(context);
}

/**
 * While the gateway is lost, asks `GET /healthz` with back-off until it
 * answers. A view that only listens (a lock's event stream, waiting on a
 * reconnection that the gateway may answer only with the next event) would
 * otherwise leave the page saying "lost" after the gateway is back.
 */
function watchForRecovery({ gateway, link }: Context): void {
  let probing = false;
  link.onChange((state) => {
    if (state.kind !== "lost" || probing) return;
    probing = true;
    void (async () => {
      const backoff = new Backoff();
      const never = new AbortController().signal;
      while (link.state.kind === "lost") {
        await sleep(backoff.next(), never);
        await gateway.health(never).catch(() => undefined);
      }
      probing = false;
    })();
  });
}

/** The header's line on the gateway: live (and which instance answered), or lost since when. */
function linkStatus(link: Link): HTMLElement {
  const text = h("span", {});
  const element = h("p", { class: "link", role: "status", "data-state": "connecting" }, h("span", { class: "dot", "aria-hidden": "true" }), text);
  link.onChange((state: LinkState) => {
    element.dataset.state = state.kind;
    switch (state.kind) {
      case "connecting":
        setText(text, "Connecting to the gateway…");
        break;
      case "live":
        setText(text, state.instance ? `Live · ${state.instance}` : "Live");
        break;
      case "lost":
        setText(text, `Lost the gateway at ${format.clockTime(state.since).slice(0, 8)} (${state.reason}); retrying… The figures shown are from before then.`);
        break;
      case "backend-down":
        setText(text, `The gateway cannot reach Redis (since ${format.clockTime(state.since).slice(0, 8)}); retrying…`);
        break;
    }
  });
  return element;
}

/** Typing the admin token once, for this tab; or forgetting it. */
function tokenForm(token: AdminToken): HTMLElement {
  const container = h("div", { class: "token" });
  const render = () => {
    if (token.value !== null) {
      const forget = h("button", { type: "button" }, "Forget");
      forget.addEventListener("click", () => {
        token.forget();
        container.querySelector("input")?.focus();
      });
      replaceChildren(container, h("p", {}, icon(ICONS.key), "Admin token set for this tab."), forget);
      return;
    }
    const input = h("input", {
      id: "admin-token",
      name: "admin-token",
      type: "password",
      autocomplete: "off",
      spellcheck: "false",
      required: true,
      "aria-describedby": "admin-token-hint",
    });
    const form = h(
      "form",
      { class: "token-form" },
      h("label", { for: "admin-token" }, "Admin token"),
      input,
      h("button", { type: "submit" }, "Use"),
      h("p", { id: "admin-token-hint", class: "hint" }, "Kept for this tab only."),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!input.value.trim()) return;
      token.set(input.value);
      container.querySelector("button")?.focus();
    });
    replaceChildren(container, form);
  };
  render();
  token.onChange(render);
  return container;
}

const app = document.getElementById("app");
if (app) start(app);
