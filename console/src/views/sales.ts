/**
 * The flash sales (`GET /seckill`, admin token), read twice a second: each
 * sale's stock and sold, its orders and refusals (sold out, over the
 * per-user cap, rate-limited) as totals, as rates and as a live chart over
 * the last minutes, and the order hand-off's stored and pending.
 *
 * Polled rather than streamed: one short request per tick passes through
 * nginx and any instance alike, and every instance reads the same figures
 * from Redis, so no instance has to hold a stream of every sale open.
 */

import type { View } from "../context";
import { h, reorderChildren, replaceChildren, setText } from "../dom";
import * as format from "../format";
import type { Sale } from "../gateway";
import { poll } from "../poll";
import { SaleChart } from "../sale-chart";
import { SaleHistory } from "../sale-history";
import { problemNotice } from "./leases";

const EVERY_MS = 500;
const WINDOW_MS = 5 * 60_000;

export const salesView: View = (root, context, signal) => {
  const needToken = h(
    "p",
    { class: "notice" },
    "The sales are for admins: enter the admin token at the top of the page to see them.",
  );
  const summary = h("p", { class: "summary", role: "status" });
  const problem = h("div", {});
  const list = h("div", { class: "sale-list" });
  replaceChildren(
    root,
    h("h1", { tabindex: "-1" }, "Sales"),
    h("p", { class: "hint" }, `Stock, orders and refusals of every sale, read twice a second; charts show the last ${WINDOW_MS / 60_000} minutes.`),
    summary,
    needToken,
    problem,
    list,
  );

  const cards = new Map<string, SaleCard>();
  signal.addEventListener("abort", () => {
    for (const card of cards.values()) card.destroy();
  });

  const render = (sales: Sale[]) => {
    const at = Date.now();
    const seen = new Set<string>();
    const wanted = sales.map((sale) => {
      seen.add(sale.sku);
      let card = cards.get(sale.sku);
      if (!card) {
        card = new SaleCard(sale.sku);
        cards.set(sale.sku, card);
      }
      card.update(sale, at);
      return card.element;
    });
    for (const [sku, card] of cards) {
      if (!seen.has(sku)) {
        card.destroy();
        cards.delete(sku);
      }
    }
    reorderChildren(list, wanted);
    setText(summary, sales.length === 0 ? "No sale yet: create one with PUT /seckill/{sku}." : `${format.plural(sales.length, "sale")}.`);
  };

  const showAccess = () => {
    needToken.hidden = context.token.value !== null;
  };
  showAccess();
  const stopWatching = context.token.onChange(showAccess);
  signal.addEventListener("abort", stopWatching);

  void (async () => {
    // Without a token the answer is known (401): ask nothing until one is typed.
    while (context.token.value === null && !signal.aborted) await context.token.changed(signal);
    await poll(
      async (tickSignal) => render((await context.gateway.sales(tickSignal)).body.sales),
      {
        everyMs: EVERY_MS,
        signal,
        token: context.token,
        onProblem: (refusal) => replaceChildren(problem, refusal ? problemNotice(refusal) : null),
      },
    );
  })();
};

/** One sale: its figures, redrawn in place, and its chart. */
class SaleCard {
  readonly element: HTMLElement;
  private readonly history = new SaleHistory(WINDOW_MS);
  private readonly chart: SaleChart;
  private readonly state: HTMLElement;
  private readonly stockBar: HTMLProgressElement;
  private readonly figures = new Map<string, HTMLElement>();

  constructor(readonly sku: string) {
    this.chart = new SaleChart(sku);
    this.state = h("span", { class: "chip" });
    this.stockBar = h("progress", { max: 1, value: 0, "aria-label": `Stock of ${sku}` });
    const value = <K extends "dd" | "strong" | "span">(tag: K, name: string) => {
      const element = h(tag, { "data-figure": name }, "–");
      this.figures.set(name, element);
      return element;
    };
    const figure = (name: string, label: string) => h("div", {}, h("dt", {}, label), value("dd", name));
    this.element = h(
      "article",
      { class: "sale-card", "data-sku": sku, "aria-label": `Sale ${sku}` },
      h("header", {}, h("h2", {}, sku), this.state),
      h("div", { class: "stock" }, h("p", {}, "Stock ", value("strong", "stock"), " of ", value("span", "initial")), this.stockBar),
      h(
        "dl",
        { class: "figures" },
        figure("sold", "Sold"),
        figure("orders", "Orders"),
        figure("orders-rate", "Orders/s"),
        figure("cap", "Per-user cap"),
        figure("segments", "Segments"),
        figure("stored", "Stored"),
        figure("pending", "Pending"),
      ),
      h("h3", {}, "Refused"),
      h(
        "dl",
        { class: "figures refusals" },
        figure("sold_out", "Sold out"),
        figure("limit_exceeded", "Over the cap"),
        figure("rate_limited", "Rate-limited"),
      ),
      this.chart.element,
    );
  }

  update(sale: Sale, atMs: number): void {
    const refused = sale.refused ?? { sold_out: 0, limit_exceeded: 0, rate_limited: 0 };
    this.history.add(atMs, { ...sale, ...refused });
    const show = (name: string, text: string) => {
      const element = this.figures.get(name);
      if (element) setText(element, text);
    };
    show("stock", format.count(sale.stock));
    show("initial", format.count(sale.initial_stock));
    show("sold", format.count(sale.sold));
    show("orders", format.count(sale.orders));
    show("orders-rate", format.rate(this.history.latest("orders")));
    show("cap", format.count(sale.per_user_limit));
    show("segments", format.count(sale.segments ?? 1));
    // Null (or absent) when no order hand-off runs.
    const handedOff = (n: number | null | undefined) => (n === null || n === undefined ? "no hand-off" : format.count(n));
    show("stored", handedOff(sale.stored));
    show("pending", handedOff(sale.pending));
    for (const reason of ["sold_out", "limit_exceeded", "rate_limited"] as const) {
      show(reason, sale.refused ? format.count(refused[reason]) : "–");
    }
    setText(this.state, sale.stock === 0 ? "Sold out" : "On sale");
    this.state.classList.toggle("sold-out", sale.stock === 0);
    this.stockBar.max = Math.max(1, sale.initial_stock);
    this.stockBar.value = sale.stock;
    this.chart.update(this.history, sale.initial_stock);
  }

  destroy(): void {
    this.chart.destroy();
  }
}
