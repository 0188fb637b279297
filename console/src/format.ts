/** How durations, moments, counts and lock modes read on the page. */

const COUNT = new Intl.NumberFormat("en");
const RATE = new Intl.NumberFormat("en", { maximumFractionDigits: 1 });

/** `12.3 s`, `4 min 05 s`, `2 h 03 min`; a lease that is over reads `0 s`. */
export function duration(ms: number): string {
  if (ms <= 0) return "0 s";
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.floor(ms / 1000);
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
  }
  const minutes = Math.floor(seconds / 60);
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

/** How long something has lasted, to the second: `14 s`, `4 min 05 s`. */
export function age(ms: number): string {
  return ms < 60_000 ? `${Math.max(0, Math.floor(ms / 1000))} s` : duration(ms);
}

/** A moment as the local wall clock with milliseconds: `17:31:07.268`. */
export function clockTime(epochMs: number): string {
  const at = new Date(epochMs);
  const two = (n: number) => String(n).padStart(2, "0");
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}.${String(at.getMilliseconds()).padStart(3, "0")}`;
}

/** A count with thousands separators. */
export function count(n: number): string {
  return COUNT.format(n);
}

/** A rate per second, one decimal at most. */
export function rate(perSecond: number | null): string {
  return perSecond === null ? "–" : RATE.format(perSecond);
}

/** `1 holder`, `3 holders`. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${count(n)} ${n === 1 ? one : many}`;
}

/** `exclusive`, `shared`, or `counting, up to N`. */
export function modeLabel(mode: string, limit: number | undefined): string {
  return mode === "exclusive" && limit !== undefined && limit > 1 ? `counting, up to ${count(limit)}` : mode;
}
