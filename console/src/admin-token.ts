/**
 * The admin token, typed once and kept for this tab only.
 *
 * It lives in `sessionStorage` (gone when the tab closes, never shared with
 * other tabs, never in the URL) and goes out as `Authorization: Bearer` on
 * every request: the sale routes need it, the lock routes accept it in
 * place of an API key, and revocation needs it.
 */

const STORAGE_KEY = "lockgate.admin-token";

type Listener = () => void;

export class AdminToken {
  private listeners = new Set<Listener>();
  // Storage can be refused (a privacy mode, a sandboxed frame): the token
  // then lasts as long as the page.
  private fallback: string | null = null;

  get value(): string | null {
    try {
      return sessionStorage.getItem(STORAGE_KEY);
    } catch {
      return this.fallback;
    }
  }

  set(token: string): void {
    this.store(token.trim() || null);
  }

  forget(): void {
    this.store(null);
  }

  /** Calls `listener` whenever the token is set or forgotten; returns the unsubscribe. */
  onChange(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Resolves at the next change of the token, or never if `signal` aborts first. */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const stop = this.onChange(() => {
        stop();
        resolve();
      });
      signal.addEventListener("abort", stop, { once: true });
    });
  }

  private store(token: string | null): void {
    try {
      if (token === null) sessionStorage.removeItem(STORAGE_KEY);
      else sessionStorage.setItem(STORAGE_KEY, token);
    } catch {
      this.fallback = token;
    }
    for (const listener of this.listeners) listener();
  }
}
