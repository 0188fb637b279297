/**
 * A sale's recent past, from its counters as successive polls read them.
 *
 * The gateway keeps totals (orders, refusals by reason); rates are the
 * differences between two readings over the time between them. Each rate
 * is taken over the readings of the last `rateWindowMs` (about four polls)
 * so that one late answer does not draw a spike. A reset of the sale sets
 * the counters back: a counter that went down starts a new epoch, and no
 * rate spans two epochs (the chart shows a gap there instead of a negative
 * rate).
 */

export interface SaleReading {
  stock: number;
  initial_stock: number;
  sold: number;
  orders: number;
  sold_out: number;
  limit_exceeded: number;
  rate_limited: number;
}

/** The counters whose differences become rates, and their names in the chart. */
export const RATE_COUNTERS = ["orders", "sold_out", "limit_exceeded", "rate_limited"] as const;
export type RateCounter = (typeof RATE_COUNTERS)[number];

interface Sample {
  atMs: number;
  epoch: number;
  reading: SaleReading;
}

export class SaleHistory {
  private samples: Sample[] = [];
  private epoch = 0;
  /** Seconds since the epoch (uPlot's x values), then one array per series. */
  readonly times: number[] = [];
  readonly stock: (number | null)[] = [];
  readonly rates: Record<RateCounter, (number | null)[]> = {
    orders: [],
    sold_out: [],
    limit_exceeded: [],
    rate_limited: [],
  };
  /** The moments (ms) at which a reset was seen. */
  readonly resets: number[] = [];

  constructor(
    private readonly windowMs = 5 * 60_000,
    private readonly rateWindowMs = 2_000,
  ) {}

  add(atMs: number, reading: SaleReading): void {
    const last = this.samples.at(-1);
    if (last && wasReset(last.reading, reading)) {
      this.epoch += 1;
      this.resets.push(atMs);
    }
    const sample = { atMs, epoch: this.epoch, reading };
    this.samples.push(sample);
    const base = this.rateBase(sample);
    this.times.push(atMs / 1000);
    this.stock.push(reading.stock);
    for (const counter of RATE_COUNTERS) {
      const seconds = base ? (atMs - base.atMs) / 1000 : 0;
      this.rates[counter].push(base && seconds > 0 ? (reading[counter] - base.reading[counter]) / seconds : null);
    }
    this.trim(atMs);
  }

  /** The latest rate of `counter`, per second (null before two readings of one epoch). */
  latest(counter: RateCounter): number | null {
    return this.rates[counter].at(-1) ?? null;
  }

  /** The highest rate of `counter` in the window. */
  peak(counter: RateCounter): number {
    return this.rates[counter].reduce<number>((top, value) => Math.max(top, value ?? 0), 0);
  }

  /** The stock at the start of the window and now. */
  stockSpan(): { first: number; last: number } | null {
    const first = this.samples[0];
    const last = this.samples.at(-1);
    return first && last ? { first: first.reading.stock, last: last.reading.stock } : null;
  }

  /** uPlot's data: x values, the stock, then the rates in `RATE_COUNTERS` order. */
  chartData(): [number[], ...(number | null)[][]] {
    return [this.times, this.stock, ...RATE_COUNTERS.map((counter) => this.rates[counter])];
  }

  /** The oldest reading of the same epoch within the rate window before `sample`. */
  private rateBase(sample: Sample): Sample | undefined {
    let base: Sample | undefined;
    for (let i = this.samples.length - 2; i >= 0; i--) {
      const earlier = this.samples[i]!;
      if (earlier.epoch !== sample.epoch) break;
      if (base && sample.atMs - earlier.atMs > this.rateWindowMs) break;
      base = earlier;
    }
    return base;
  }

  private trim(nowMs: number): void {
    let drop = 0;
    while (drop < this.samples.length - 1 && nowMs - this.samples[drop]!.atMs > this.windowMs) drop++;
    if (drop === 0) return;
    this.samples.splice(0, drop);
    this.times.splice(0, drop);
    this.stock.splice(0, drop);
    for (const counter of RATE_COUNTERS) this.rates[counter].splice(0, drop);
    while (this.resets.length > 0 && nowMs - this.resets[0]! > this.windowMs) this.resets.shift();
  }
}

/** Whether the sale was reset between two readings: a counter that only grows went down, or the stock was refilled. */
export function wasReset(before: SaleReading, after: SaleReading): boolean {
  return (
    after.initial_stock !== before.initial_stock ||
    after.stock > before.stock ||
    after.sold < before.sold ||
    RATE_COUNTERS.some((counter) => after[counter] < before[counter])
  );
}
