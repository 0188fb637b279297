/**
 * Exact JSON for the gateway's answers.
 *
 * Fencing tokens are 64-bit integers above 2^53 (they start from the Redis
 * clock in microseconds), which a JavaScript number would round to a
 * different token. `parseExact` reads the raw text, quotes every integer
 * literal that a double cannot hold before `JSON.parse` sees it, and hands
 * every `fencing_token` back as its decimal string, whatever its size.
 */

/** A fencing token, as the exact decimal text the gateway sent. */
export type FencingToken = string;

/** `JSON.parse`, with unsafe integers as strings and fencing tokens always strings. */
export function parseExact<T>(text: string): T {
  return JSON.parse(quoteUnsafeIntegers(text), (key, value: unknown) =>
    key === "fencing_token" && typeof value === "number" ? String(value) : value,
  ) as T;
}

const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/**
 * `text` with every integer literal outside strings that is not a safe
 * integer wrapped in quotes. A string is skipped as a whole (escapes
 * included), so a holder's value that looks like a number is left alone.
 */
export function quoteUnsafeIntegers(text: string): string {
  let out = "";
  let copied = 0;
  let at = 0;
  while (at < text.length) {
    const c = text.charCodeAt(at);
    if (c === 0x22 /* " */) {
      at = stringEnd(text, at);
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      NUMBER.lastIndex = at;
      const literal = NUMBER.exec(text)?.[0] ?? text[at]!;
      const end = at + literal.length;
      if (/^-?\d+$/.test(literal) && !Number.isSafeInteger(Number(literal))) {
        out += `${text.slice(copied, at)}"${literal}"`;
        copied = end;
      }
      at = end;
    } else {
      at += 1;
    }
  }
  return out + text.slice(copied);
}

/** The index just past the string literal that opens at `start`. */
function stringEnd(text: string, start: number): number {
  let at = start + 1;
  while (at < text.length) {
    const c = text.charCodeAt(at);
    if (c === 0x5c /* \ */) at += 2;
    else if (c === 0x22) return at + 1;
    else at += 1;
  }
  return at;
}
