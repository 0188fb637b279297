/**
 * Revocation of a lock (`DELETE /locks/{key}?force=true`, admin token): a
 * button, a confirmation that says what it does to the holders, and the
 * outcome.
 */

import type { Context } from "../context";
import { h, icon, ICONS, replaceChildren, setText } from "../dom";
import * as format from "../format";
import { Refusal } from "../gateway";
import { problemNotice } from "./leases";

/** The revocation section of `key`'s page; `signal` ends it with the page. */
export function revocationSection(key: string, context: Context, signal: AbortSignal): HTMLElement {
  const outcome = h("div", { role: "status", class: "outcome" });
  const hint = h("p", { class: "hint", id: "revoke-hint" });
  const open = h("button", { type: "button", class: "danger", "aria-describedby": "revoke-hint" }, "Revoke every hold…");
  const dialog = confirmation(key);

  const showAccess = () => {
    const hasToken = context.token.value !== null;
    open.disabled = !hasToken;
    setText(hint, hasToken ? "Ends every hold of this lock now. Needs the admin token." : "Enter the admin token at the top of the page to revoke.");
  };
  showAccess();
  const stopWatching = context.token.onChange(showAccess);
  signal.addEventListener("abort", () => {
    stopWatching();
    if (dialog.open) dialog.close();
  });

  open.addEventListener("click", () => {
    dialog.returnValue = "";
    dialog.showModal();
  });
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue === "revoke") {
      open.disabled = true;
      await revoke(key, context, signal, outcome);
      showAccess();
    }
    open.focus();
  });

  return h(
    "section",
    { "aria-labelledby": "revoke-section-title", class: "revocation" },
    h("h2", { id: "revoke-section-title" }, "Revocation"),
    open,
    hint,
    outcome,
    dialog,
  );
}

/** The dialog that asks to confirm, saying what revoking does; it closes with `revoke` or `cancel`. */
function confirmation(key: string): HTMLDialogElement {
  return h(
    "dialog",
    { "aria-labelledby": "revoke-title", "aria-describedby": "revoke-what" },
    h(
      "form",
      { method: "dialog" },
      h("h2", { id: "revoke-title" }, icon(ICONS.alert), `Revoke ${key}?`),
      h(
        "p",
        { id: "revoke-what" },
        "Every holder loses the lock at once: a streamed holder is told it was lost (revoked), ",
        h("code", {}, "lockgate run"),
        " stops its command, watchers see ",
        h("code", {}, "revoked"),
        ", and the next grant gets a larger fencing token, so resources that check fencing tokens refuse the old holders' writes.",
      ),
      h(
        "div",
        { class: "actions" },
        h("button", { type: "submit", value: "cancel", autofocus: true }, "Cancel"),
        h("button", { type: "submit", value: "revoke", class: "danger" }, "Revoke"),
      ),
    ),
  );
}

/** Sends the revocation and shows its outcome in `outcome`. */
async function revoke(key: string, context: Context, signal: AbortSignal, outcome: HTMLElement): Promise<void> {
  replaceChildren(outcome, h("p", {}, "Revoking…"));
  try {
    const answer = await context.gateway.revoke(key, signal);
    replaceChildren(outcome, h("p", { class: "notice ok" }, answer.status === 204 ? `Revoked at ${format.clockTime(Date.now())}.` : "Revoked."));
  } catch (error) {
    if (signal.aborted) return;
    if (error instanceof Refusal && error.problem.status === 404) {
      replaceChildren(outcome, h("p", { class: "notice" }, "Nobody held it: nothing to revoke."));
    } else if (error instanceof Refusal) {
      replaceChildren(outcome, problemNotice(error.problem));
    } else {
      replaceChildren(outcome, h("p", { class: "notice problem" }, `Not revoked: ${(error as Error).message}.`));
    }
  }
}
