/**
 * JSON from the gateway, with its fencing tokens kept exact: the one reader
 * of lockgate's TypeScript for it (the console imports this file too).
 *
 * The contract makes a fencing token a 64-bit integer, and a double holds
 * integers exactly only up to 2^53: `JSON.parse` would round a larger one,
 * and two different tokens could compare equal. (Today's tokens start from
 * the Redis clock in microseconds, under 2^53, but nothing in the contract
 * keeps them there.) `parseGatewayJson` quotes every integer literal that a
 * double cannot hold exactly, in the raw text, before parsing;
 * `fencing_token` members then become `bigint`s, whatever their size.
 */

/** Parses gateway JSON; every `fencing_token` member, at any depth, is a `bigint`. */
export function parseGatewayJson(text: string): unknown {
  return reviveFencingTokens(JSON.parse(quoteUnsafeIntegers(text)));
}

/**
 * Parses a gateway answer into this library's shape: as `parseGatewayJson`,
 * with every member name in camelCase (`expires_at_ms` becomes `expiresAtMs`).
 */
export function readGatewayJson<T>(text: string): T {
  return camelize(parseGatewayJson(text)) as T;
}

function camelize(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(camelize);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([name, member]) => [
        name.replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase()),
        camelize(member),
      ]),
    );
  }
  return value;
}

/**
 * The JSON text with each integer literal beyond `Number.MAX_SAFE_INTEGER`
 * turned into a string literal. The scan skips string contents (so a value
 * that merely looks like a number is left alone) and fractions or exponents
 * (which are not integers and are not fencing tokens).
 */
export function quoteUnsafeIntegers(text: string): string {
  let out = "";
  let copiedUpTo = 0;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      i = endOfString(text, i);
      continue;
    }
    if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      let end = i + 1;
      while (end < text.length && isNumberChar(text.charCodeAt(end))) end++;
      const literal = text.slice(i, end);
      if (/^-?\d+$/.test(literal) && !Number.isSafeInteger(Number(literal))) {
        out += text.slice(copiedUpTo, i) + `"${literal}"`;
        copiedUpTo = end;
      }
      i = end;
      continue;
    }
    i++;
  }
  return copiedUpTo === 0 ? text : out + text.slice(copiedUpTo);
}

/** The index just past the string literal that opens at `start`. */
function endOfString(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x5c /* \ */) i += 2;
    else if (c === 0x22 /* " */) return i + 1;
    else i++;
  }
  return i;
}

function isNumberChar(c: number): boolean {
  // digits, '.', 'e', 'E', '+', '-'
  return (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;
}

function reviveFencingTokens(value: unknown): unknown {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = reviveFencingTokens(value[i]);
    return value;
  }
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>;
    for (const [name, member] of Object.entries(record)) {
      if (name === "fencing_token" && (typeof member === "number" || typeof member === "string")) {
        record[name] = BigInt(member);
      } else {
        record[name] = reviveFencingTokens(member);
      }
    }
  }
  return value;
}
