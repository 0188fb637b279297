/**
 * The HTTP plumbing every call shares: the gateway's address and API key,
 * the timeout on each answer, and the mapping of failures to this library's
 * errors (a refused connection or a timeout is `GatewayUnavailableError`; a
 * problem document becomes the error its slug names).
 */

import { GatewayUnavailableError, errorFromProblem, type LockgateError, type Problem } from "./errors.js";
import { parseGatewayJson } from "./json.js";
import type { Dispatcher } from "undici-types";

/** A whole answer: status, headers and body text. */
export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

export interface RequestOptions {
  /** Sent as JSON. */
  body?: unknown;
  headers?: Record<string, string>;
  /** The caller's cancellation; the call rejects with its reason. */
  signal?: AbortSignal | undefined;
  /** Overrides the gateway's timeout for this call (a waiting acquire needs longer). */
  timeoutMs?: number;
}

export class Transport {
  readonly baseUrl: string;

  constructor(
    baseUrl: string,
    private readonly apiKey: string | undefined,
    readonly timeoutMs: number,
    private readonly dispatcher?: Dispatcher,
  ) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
  }

  /** Sends a request and reads its whole answer; a non-2xx answer is thrown as its error. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Answer> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const deadline = AbortSignal.timeout(timeoutMs);
    const signal = options.signal ? AbortSignal.any([options.signal, deadline]) : deadline;
    let answer: Answer;
    try {
      const response = await fetch(this.baseUrl + path, this.init(method, options, signal));
      answer = { status: response.status, headers: response.headers, text: await response.text() };
    } catch (error) {
      throw this.failure(error, options.signal, deadline, timeoutMs);
    }
    if (answer.status >= 400) throw problemError(answer);
    return answer;
  }

  /**
   * Opens a `text/event-stream` answer. `signal` (the caller's controller)
   * both cancels the wait for the answer's head and, later, closes the stream.
   * Rejects with a refusal's error, or `GatewayUnavailableError`.
   */
  async openStream(
    method: string,
    path: string,
    options: RequestOptions & { signal: AbortSignal },
  ): Promise<Response> {
    let response: Response;
    try {
      response = await fetch(
        this.baseUrl + path,
        this.init(method, { ...options, headers: { accept: "text/event-stream", ...options.headers } }, options.signal),
      );
    } catch (error) {
      throw this.failure(error, options.signal, undefined, 0);
    }
    if (response.status >= 400 || !response.body) {
      const text = await response.text().catch(() => "");
      throw problemError({ status: response.status, headers: response.headers, text });
    }
    if (!(response.headers.get("content-type") ?? "").includes("text/event-stream")) {
      const text = await response.text().catch(() => "");
      throw new NotAStreamError(`the answer from ${this.baseUrl}${path} is not an event stream`, {
        status: response.status,
        headers: response.headers,
        text,
      });
    }
    return response;
  }

  private init(method: string, options: RequestOptions, signal: AbortSignal): RequestInit {
    const headers: Record<string, string> = { ...options.headers };
    // A call's own credentials (an admin token) go instead of the API key.
    if (this.apiKey !== undefined) headers.authorization ??= `Bearer ${this.apiKey}`;
    const init: RequestInit & { dispatcher?: Dispatcher } = { method, headers, signal };
    // Node's fetch takes an undici dispatcher (TLS options, a proxy) beside the standard fields.
    if (this.dispatcher !== undefined) init.dispatcher = this.dispatcher;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    return init;
  }

  /**
   * What a failed `fetch` means: the caller's own abort (its reason, as is),
   * our timeout, or an unreachable gateway.
   */
  failure(error: unknown, callerSignal: AbortSignal | undefined, deadline: AbortSignal | undefined, timeoutMs: number): unknown {
    if (callerSignal?.aborted) return callerSignal.reason;
    if (deadline?.aborted) {
      return new GatewayUnavailableError(`no answer from the gateway at ${this.baseUrl} within ${timeoutMs} ms`, {
        cause: error,
      });
    }
    return unreachable(this.baseUrl, error);
  }
}

/** A stream was asked for and a whole answer came (a gateway that does not stream this route). */
export class NotAStreamError extends GatewayUnavailableError {
  constructor(
    message: string,
    /** What the gateway answered instead. */
    readonly answer: Answer,
  ) {
    super(message);
    // What callers see is the public class.
    this.name = "GatewayUnavailableError";
  }
}

/** The error for a gateway that could not be reached, or whose connection broke. */
export function unreachable(baseUrl: string, error: unknown): GatewayUnavailableError {
  // undici reports "fetch failed" and keeps the socket's own error in `cause`.
  let cause: unknown = error;
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  const why = cause instanceof Error ? cause.message : String(cause);
  return new GatewayUnavailableError(`cannot reach the gateway at ${baseUrl}: ${why}`, { cause: error });
}

/** The error a refusal stands for: its problem document, or one made from the status. */
export function problemError(answer: Answer): LockgateError {
  let problem: Problem | undefined;
  if ((answer.headers.get("content-type") ?? "").includes("json")) {
    try {
      const parsed = parseGatewayJson(answer.text);
      if (parsed !== null && typeof parsed === "object" && typeof (parsed as Problem).type === "string") {
        problem = parsed as Problem;
      }
    } catch {
      // Not JSON after all: described from the status below.
    }
  }
  // A proxy in front of the gateway may answer without a problem document.
  problem ??= {
    type: "about:blank",
    title: `HTTP ${answer.status}`,
    status: answer.status,
    detail: answer.text.slice(0, 200),
  };
  return errorFromProblem(problem, retryAfterMs(answer.headers));
}

/** `Retry-After` in milliseconds (the gateway sends whole seconds). */
export function retryAfterMs(headers: Headers): number | undefined {
  const seconds = Number(headers.get("retry-after"));
  return headers.has("retry-after") && Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

/** The path of a lock: `/locks/<key>`, the key escaped. */
export function lockPath(key: string, suffix = ""): string {
  return `/locks/${encodeURIComponent(key)}${suffix}`;
}
