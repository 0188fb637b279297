/**
 * The fleet (`#/instances`): the data format in use and the version of the
 * instance that answered (`GET /version`, open to all), and, with the admin
 * token, every live instance on this Redis (`GET /admin/instances`): its
 * id, version, data formats, start and address. Both are read once a
 * second, as the other views read theirs.
 *
 * An instance's record is rewritten at its beat (every 2 s) and dropped
 * once it goes stale, so an instance that stopped leaves the table within
 * seconds; behind nginx, `GET /version` is answered by whichever instance
 * the request reached, which the page names.
 */

import type { View } from "../context";
import { h, reorderChildren, replaceChildren, setText } from "../dom";
import * as format from "../format";
import type { GatewayVersion, Instance } from "../gateway";
import { poll } from "../poll";
import { formatInUseText, formatsText, readsText, startedAgoText, utcText } from "./instance-text";
import { problemNotice } from "./leases";

const EVERY_MS = 1000;

export const instancesView: View = (root, context, signal) => {
  const inUse = h("dd", { "data-figure": "format-in-use" }, "–");
  const version = h("dd", { "data-figure": "version" }, "–");
  const formats = h("dd", { "data-figure": "formats" }, "–");
  const answeredBy = h("dd", { "data-figure": "answered-by" }, "–");
  const versionProblem = h("div", {});
  const needToken = h(
    "p",
    { class: "notice" },
    "The list of instances is for admins: enter the admin token at the top of the page to see it.",
  );
  const summary = h("p", { class: "summary", role: "status" });
  const problem = h("div", {});
  const rows = h("tbody", {});
  const table = h(
    "div",
    // Scrolls sideways on a phone: a keyboard reaches it, a screen reader names it.
    { class: "table-scroll", role: "region", "aria-labelledby": "instances-caption", tabindex: "0", hidden: true },
    h(
      "table",
      { class: "instances" },
      h("caption", { id: "instances-caption", class: "visually-hidden" }, "Live instances, oldest first"),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ...["Instance", "Version", "Reads", "Writes", "Started", "Address"].map((name) => h("th", { scope: "col" }, name)),
        ),
      ),
      rows,
    ),
  );
  replaceChildren(
    root,
    h("h1", { tabindex: "-1" }, "Instances"),
    h("p", { class: "hint" }, "The gateways on this Redis and the data format they share, read once a second."),
    h(
      "section",
      { "aria-labelledby": "format-heading" },
      h("h2", { id: "format-heading" }, "Data format"),
      h(
        "dl",
        { class: "figures version" },
        h("div", {}, h("dt", {}, "In use on Redis"), inUse),
        h("div", {}, h("dt", {}, "This gateway's version"), version),
        h("div", {}, h("dt", {}, "Its formats"), formats),
        h("div", {}, h("dt", {}, "Answered by"), answeredBy),
      ),
      versionProblem,
    ),
    h(
      "section",
      { "aria-labelledby": "instances-heading" },
      h("h2", { id: "instances-heading" }, "Live instances"),
      summary,
      needToken,
      problem,
      table,
    ),
  );

  const showVersion = (answer: GatewayVersion) => {
    setText(inUse, formatInUseText(answer.format_in_use));
    setText(version, answer.version);
    setText(formats, formatsText(answer.formats));
    const { state } = context.link;
    setText(answeredBy, state.kind === "live" && state.instance ? state.instance : "–");
  };

  const byId = new Map<string, InstanceRow>();
  const showInstances = (instances: Instance[]) => {
    const now = Date.now();
    const seen = new Set<string>();
    const wanted = instances.map((instance) => {
      seen.add(instance.id);
      let row = byId.get(instance.id);
      if (!row) {
        row = new InstanceRow(instance.id);
        byId.set(instance.id, row);
      }
      row.update(instance, now);
      return row.element;
    });
    for (const id of byId.keys()) if (!seen.has(id)) byId.delete(id);
    reorderChildren(rows, wanted);
    table.hidden = false;
    setText(summary, instances.length === 0 ? "No live instance has a record (instances before 0.2.0 keep none)." : `${format.plural(instances.length, "live instance")}.`);
  };

  const showAccess = () => {
    const noToken = context.token.value === null;
    needToken.hidden = !noToken;
    if (noToken) {
      // What was shown was read with a token that is gone.
      table.hidden = true;
      setText(summary, "");
    }
  };
  showAccess();
  const stopWatching = context.token.onChange(showAccess);
  signal.addEventListener("abort", stopWatching);

  void poll(async (tickSignal) => showVersion((await context.gateway.version(tickSignal)).body), {
    everyMs: EVERY_MS,
    signal,
    token: context.token,
    onProblem: (refusal) => replaceChildren(versionProblem, refusal ? problemNotice(refusal) : null),
  });

  void (async () => {
    // Without a token the answer is known (401): ask nothing until one is typed.
    while (context.token.value === null && !signal.aborted) await context.token.changed(signal);
    await poll(async (tickSignal) => showInstances((await context.gateway.instances(tickSignal)).body.instances), {
      everyMs: EVERY_MS,
      signal,
      token: context.token,
      onProblem: (refusal) => {
        replaceChildren(problem, refusal ? problemNotice(refusal) : null);
        // A refused token shows no list read with an earlier one.
        if (refusal?.status === 401 || refusal?.status === 403) {
          table.hidden = true;
          setText(summary, "");
        }
      },
    });
  })();
};

/** One instance's row, updated in place (a selection in it survives the re-reads). */
class InstanceRow {
  readonly element: HTMLTableRowElement;
  private readonly cells: Record<"version" | "reads" | "writes" | "address", HTMLElement>;
  private readonly started: HTMLTimeElement;
  private readonly startedUtc: HTMLElement;

  constructor(id: string) {
    this.cells = {
      version: h("td", { "data-field": "version" }),
      reads: h("td", { "data-field": "reads" }),
      writes: h("td", { "data-field": "writes" }),
      address: h("td", { "data-field": "address", class: "mono" }),
    };
    this.started = h("time", {});
    this.startedUtc = h("span", { class: "utc" });
    this.element = h(
      "tr",
      { "data-instance": id },
      h("th", { scope: "row", class: "mono" }, id),
      this.cells.version,
      this.cells.reads,
      this.cells.writes,
      h("td", { "data-field": "started" }, this.started, " ", this.startedUtc),
      this.cells.address,
    );
  }

  update(instance: Instance, nowMs: number): void {
    setText(this.cells.version, instance.version);
    setText(this.cells.reads, readsText(instance.formats));
    setText(this.cells.writes, String(instance.formats.writes));
    setText(this.cells.address, instance.address);
    const at = new Date(instance.started_at_ms).toISOString();
    if (this.started.dateTime !== at) this.started.dateTime = at;
    setText(this.startedUtc, utcText(instance.started_at_ms));
    setText(this.started, startedAgoText(instance.started_at_ms, nowMs));
  }
}
