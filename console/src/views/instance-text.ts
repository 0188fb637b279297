/**
 * What the instances view says of a build's data formats and of when an
 * instance started (pure, so the unit tests can hold it to its sentences).
 */

import * as format from "../format";
import type { Formats } from "../gateway";

/** `1`, `1, 2`: the formats a build reads; `none` for an empty list. */
export function readsText(formats: Formats): string {
  return formats.reads.length === 0 ? "none" : formats.reads.join(", ");
}

/** `reads 1, writes 1`. */
export function formatsText(formats: Formats): string {
  return `reads ${readsText(formats)}, writes ${formats.writes}`;
}

/** The format in use on Redis; null until the answering instance first read it. */
export function formatInUseText(formatInUse: number | null | undefined): string {
  return formatInUse === null || formatInUse === undefined ? "not read yet (Redis has not answered this instance)" : `format ${formatInUse}`;
}

/**
 * How long ago an instance started: `14 s ago`, `4 min 05 s ago`. The
 * start is by that instance's clock and `nowMs` by this one's, so a start
 * slightly in the future (clocks apart) reads as `just now`.
 */
export function startedAgoText(startedAtMs: number, nowMs: number): string {
  const ms = nowMs - startedAtMs;
  return ms < 1000 ? "just now" : `${format.age(ms)} ago`;
}

/** The moment in UTC, to the second: `2025-05-04 17:31:07 UTC`. */
export function utcText(epochMs: number): string {
  return `${new Date(epochMs).toISOString().slice(0, 19).replace("T", " ")} UTC`;
}
