/**
 * A sale's chart: the stock (left axis) and the rates of orders and of
 * each kind of refusal (right axis) over the last minutes, drawn by uPlot.
 *
 * uPlot's own legend toggles series on a mouse click only, so the chart
 * has its own: a checkbox per series (keyboard and screen readers reach
 * it) with the series' latest figure. A sentence under the chart says what
 * it shows for those who do not see it.
 */

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h, setText } from "./dom";
import * as format from "./format";
import { RATE_COUNTERS, type RateCounter, type SaleHistory } from "./sale-history";

interface SeriesLook {
  label: string;
  color: string;
  dash?: number[];
  width: number;
}

/** Stock first, then the rates in `RATE_COUNTERS` order. Dashes tell the series apart without colour. */
const STOCK: SeriesLook = { label: "Stock", color: "#1d4ed8", width: 2.5 };
const RATES: Record<RateCounter, SeriesLook> = {
  orders: { label: "Orders/s", color: "#15803d", width: 2 },
  sold_out: { label: "Sold out/s", color: "#b45309", dash: [6, 3], width: 2 },
  limit_exceeded: { label: "Over the cap/s", color: "#7e22ce", dash: [2, 3], width: 2 },
  rate_limited: { label: "Rate-limited/s", color: "#b91c1c", dash: [9, 3, 2, 3], width: 2 },
};

const HEIGHT = 220;
/** The time axis spans the readings kept (the history trims them), and at least this long. */
const MIN_SPAN_S = 10;
const FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

export class SaleChart {
  readonly element: HTMLElement;
  private readonly plot: uPlot;
  private readonly values: HTMLElement[] = [];
  private readonly summary: HTMLParagraphElement;
  private readonly resize: ResizeObserver;
  private initialStock = 1;

  constructor(private readonly sku: string) {
    const canvas = h("div", { class: "chart-canvas", role: "img", "aria-label": `Chart of stock and orders per second for ${sku}` });
    this.summary = h("p", { class: "chart-summary" });
    const looks = [STOCK, ...RATE_COUNTERS.map((counter) => RATES[counter])];
    const legend = h(
      "ul",
      { class: "legend", "aria-label": `Series of the ${sku} chart` },
      ...looks.map((look, index) => {
        const value = h("span", { class: "legend-value" }, "–");
        this.values.push(value);
        const box = h("input", { type: "checkbox", checked: true });
        box.addEventListener("change", () => this.plot.setSeries(index + 1, { show: box.checked }));
        return h(
          "li",
          {},
          h(
            "label",
            {},
            box,
            swatch(look),
            h("span", { class: "legend-label" }, look.label),
            value,
          ),
        );
      }),
    );
    this.element = h("figure", { class: "sale-chart" }, canvas, h("figcaption", {}, legend, this.summary));

    this.plot = new uPlot(this.options(canvas.clientWidth || 600, looks), [[]], canvas);
    let width = 0;
    this.resize = new ResizeObserver(() => {
      const next = Math.floor(canvas.clientWidth);
      if (next === width || next === 0) return;
      width = next;
      // Outside the observer's callback: a resize inside it is a loop the browser reports.
      requestAnimationFrame(() => this.plot.setSize({ width, height: HEIGHT }));
    });
    this.resize.observe(canvas);
  }

  update(history: SaleHistory, initialStock: number): void {
    this.initialStock = Math.max(1, initialStock);
    this.plot.setData(history.chartData());
    const latest = [history.stock.at(-1) ?? null, ...RATE_COUNTERS.map((counter) => history.latest(counter))];
    latest.forEach((value, index) => {
      const element = this.values[index];
      if (element) setText(element, index === 0 ? (value === null ? "–" : format.count(value)) : format.rate(value));
    });
    setText(this.summary, summarize(this.sku, history));
  }

  destroy(): void {
    this.resize.disconnect();
    this.plot.destroy();
  }

  private options(width: number, looks: SeriesLook[]): uPlot.Options {
    const axis = { font: FONT, labelFont: FONT, stroke: "#374151", ticks: { stroke: "#d1d5db" }, grid: { stroke: "#e5e7eb" } };
    return {
      width,
      height: HEIGHT,
      legend: { show: false },
      // A drag would zoom, and the next poll would undo it.
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: {
          time: true,
          range: (_u, min, max) => [Math.min(min, max - MIN_SPAN_S), max],
        },
        units: { range: (_u, _min, max) => [0, Math.max(this.initialStock, max)] },
        rate: { range: (_u, _min, max) => [0, Math.max(1, Math.ceil(max * 1.15))] },
      },
      axes: [
        // The wall clock, as the lock timeline shows it (uPlot's default adds a date line).
        { ...axis, space: 70, values: (_u, splits) => splits.map((s) => format.clockTime(s * 1000).slice(0, 8)) },
        { ...axis, scale: "units", label: "in stock", size: 56 },
        { ...axis, scale: "rate", label: "per second", side: 1, size: 56, grid: { show: false } },
      ],
      series: [
        { label: "Time" },
        ...looks.map((look, index) => ({
          label: look.label,
          scale: index === 0 ? "units" : "rate",
          stroke: look.color,
          width: look.width,
          ...(look.dash ? { dash: look.dash } : {}),
          points: { show: false },
          spanGaps: false,
        })),
      ],
    };
  }
}

/** A sample of a series' line, as the legend shows it. */
function swatch(look: SeriesLook): SVGSVGElement {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 8");
  svg.setAttribute("class", "swatch");
  svg.setAttribute("aria-hidden", "true");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
  line.setAttribute("x1", "0");
  line.setAttribute("x2", "24");
  line.setAttribute("y1", "4");
  line.setAttribute("y2", "4");
  line.setAttribute("stroke", look.color);
  line.setAttribute("stroke-width", String(look.width + 0.5));
  if (look.dash) line.setAttribute("stroke-dasharray", look.dash.join(" "));
  svg.appendChild(line);
  return svg;
}

/** The chart in one sentence: the stock's course and the busiest moment. */
function summarize(sku: string, history: SaleHistory): string {
  const span = history.stockSpan();
  if (!span) return `No readings of ${sku} yet.`;
  const stock =
    span.first === span.last
      ? `Stock steady at ${format.count(span.last)}`
      : `Stock went from ${format.count(span.first)} to ${format.count(span.last)}`;
  const refusals = RATE_COUNTERS.filter((counter) => counter !== "orders").map(
    (counter) => `${RATES[counter].label.replace("/s", "").toLowerCase()} peak ${format.rate(history.peak(counter))}/s`,
  );
  const resets = history.resets.length > 0 ? ` Reset ${format.plural(history.resets.length, "time")} meanwhile.` : "";
  return `${stock} in the chart's window; orders peak ${format.rate(history.peak("orders"))}/s; ${refusals.join(", ")}.${resets}`;
}
