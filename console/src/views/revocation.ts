/**
 * Revocation of one hold of a lock (`DELETE /locks/{key}?force=true&
 * fencing_token=N`, admin token): a button on each holder, a confirmation
 * that says what it does, and the outcome. The fencing token sent is the
 * one shown on the holder, so only that hold ends, never another holder's
 * (nor the next holder's, should the lock change hands meanwhile).
 */

import type { Context } from "../context";
import { h, icon, ICONS, replaceChildren, setText } from "../dom";
import * as format from "../format";
import { type FencingToken, type Lease, Refusal } from "../gateway";
import { problemNotice } from "./leases";

export class Revocation {
  /** The section: what revoking does, whether the token allows it, and the last outcome. */
  readonly section: HTMLElement;
  private readonly outcome = h("div", { role: "status", class: "outcome" });
  private readonly hint = h("p", { class: "hint", id: "revoke-hint" });
  private readonly dialog: HTMLDialogElement;
  private readonly title = h("span", {});
  private readonly sessionNote = h("p", { id: "revoke-session" });
  /** The buttons drawn, to enable and disable with the token. */
  private readonly buttons = new Set<HTMLButtonElement>();
  /** The hold the open dialog asks about, and the button that opened it. */
  private target: { lease: Lease; button: HTMLButtonElement } | undefined;
  private busy = false;

  constructor(
    private readonly key: string,
    private readonly context: Context,
    private readonly signal: AbortSignal,
  ) {
    this.dialog = this.confirmation();
    this.section = h(
      "section",
      { "aria-labelledby": "revoke-section-title", class: "revocation" },
      h("h2", { id: "revoke-section-title" }, "Revocation"),
      this.hint,
      this.outcome,
      this.dialog,
    );
    this.showAccess();
    const stopWatching = context.token.onChange(() => this.showAccess());
    signal.addEventListener("abort", () => {
      stopWatching();
      if (this.dialog.open) this.dialog.close();
    });
    this.dialog.addEventListener("close", () => void this.closed());
  }

  /** The button that revokes the hold `lease` (and only it). */
  button(lease: Lease): HTMLButtonElement {
    const token = lease.fencing_token;
    const button = h("button", { type: "button", class: "danger revoke", "aria-describedby": "revoke-hint" }, `Revoke #${token}…`);
    button.addEventListener("click", () => this.ask(lease, button));
    button.disabled = !this.allowed();
    this.buttons.add(button);
    return button;
  }

  private ask(lease: Lease, button: HTMLButtonElement): void {
    this.target = { lease, button };
    setText(this.title, `Revoke hold #${lease.fencing_token} of ${this.key}?`);
    this.sessionNote.hidden = !lease.session;
    setText(
      this.sessionNote,
      lease.session
        ? `It hangs on session ${lease.session}: that session's other locks are left alone, and if the session has a lock-delay, nobody is granted this lock until the delay is over.`
        : "",
    );
    this.dialog.returnValue = "";
    this.dialog.showModal();
  }

  private async closed(): Promise<void> {
    const target = this.target;
    this.target = undefined;
    if (!target) return;
    if (this.dialog.returnValue === "revoke") {
      this.busy = true;
      this.showAccess();
      await this.revoke(target.lease.fencing_token);
      this.busy = false;
      this.showAccess();
    }
    // Back where the user was, if that holder is still shown; else the section.
    if (target.button.isConnected) target.button.focus();
  }

  /** Whether a revocation can be sent now: with the admin token, and none under way. */
  private allowed(): boolean {
    return this.context.token.value !== null && !this.busy;
  }

  private showAccess(): void {
    const hasToken = this.context.token.value !== null;
    for (const button of this.buttons) {
      // A holder that left took its button with it (drawn, a button is always in the page).
      if (!button.isConnected) this.buttons.delete(button);
      else button.disabled = !this.allowed();
    }
    setText(
      this.hint,
      hasToken
        ? "A holder's Revoke button ends that hold only, now; the other holders keep theirs."
        : "Enter the admin token at the top of the page to revoke a hold.",
    );
  }

  /** The dialog that asks to confirm, saying what revoking does; it closes with `revoke` or `cancel`. */
  private confirmation(): HTMLDialogElement {
    return h(
      "dialog",
      { "aria-labelledby": "revoke-title", "aria-describedby": "revoke-what" },
      h(
        "form",
        { method: "dialog" },
        h("h2", { id: "revoke-title" }, icon(ICONS.alert), this.title),
        h(
          "p",
          { id: "revoke-what" },
          "This holder loses the lock at once: a streamed holder is told it was lost (revoked), ",
          h("code", {}, "lockgate run"),
          " stops its command, watchers see ",
          h("code", {}, "revoked"),
          ", and the next grant gets a larger fencing token, so resources that check fencing tokens refuse the old holder's writes. Other holders keep theirs.",
        ),
        this.sessionNote,
        h(
          "div",
          { class: "actions" },
          h("button", { type: "submit", value: "cancel", autofocus: true }, "Cancel"),
          h("button", { type: "submit", value: "revoke", class: "danger" }, "Revoke"),
        ),
      ),
    );
  }

  /** Sends the revocation of the hold `fencingToken` and shows its outcome. */
  private async revoke(fencingToken: FencingToken): Promise<void> {
    replaceChildren(this.outcome, h("p", {}, `Revoking #${fencingToken}…`));
    try {
      await this.context.gateway.revoke(this.key, fencingToken, this.signal);
      replaceChildren(this.outcome, h("p", { class: "notice ok" }, `Revoked #${fencingToken} at ${format.clockTime(Date.now())}.`));
    } catch (error) {
      if (this.signal.aborted) return;
      if (error instanceof Refusal && error.problem.status === 404) {
        replaceChildren(this.outcome, h("p", { class: "notice" }, `#${fencingToken} no longer held it: nothing was revoked.`));
      } else if (error instanceof Refusal) {
        replaceChildren(this.outcome, problemNotice(error.problem));
      } else {
        replaceChildren(this.outcome, h("p", { class: "notice problem" }, `Not revoked: ${(error as Error).message}.`));
      }
    }
  }
}
