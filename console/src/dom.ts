/**
 * A small element builder. Every piece of text that came from the gateway
 * (keys, holders' values, problem details) goes in as a text node, never as
 * HTML: a holder's value is whatever any client chose to publish.
 */

type Child = Node | string | number | null | undefined | false;

type Attributes = Record<string, string | number | boolean | null | undefined | EventListener>;

/** `<tag attributes...>children</tag>`; `on*` attributes become listeners, booleans toggle. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Attributes = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === "function") {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (value === true) {
      element.setAttribute(name, "");
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

/** Appends `children` to `parent`, skipping the empty ones. */
export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
}

/** Replaces every child of `parent` with `children`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

/** Sets the text of `element` only when it differs, so screen readers and selections are not disturbed. */
export function setText(element: Element, text: string): void {
  if (element.textContent !== text) element.textContent = text;
}

/**
 * Keeps `list`'s children in the order of `wanted`, moving as few as
 * possible: an element that stays in place keeps its focus (a moved or
 * removed element would drop it, and a keyboard user would be thrown back
 * to the top of the page twice a second).
 */
export function reorderChildren(list: Element, wanted: Element[]): void {
  const keep = new Set(wanted);
  for (const child of [...list.children]) if (!keep.has(child)) child.remove();
  let cursor = list.firstElementChild;
  for (const element of wanted) {
    if (element === cursor) {
      cursor = cursor.nextElementSibling;
    } else {
      list.insertBefore(element, cursor);
    }
  }
}

/** An SVG icon from path data, hidden from assistive technology (its label is beside it). */
export function icon(paths: string, className = "icon"): SVGSVGElement {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.setAttribute("class", className);
  for (const d of paths.split("|")) {
    const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
    path.setAttribute("d", d);
    svg.appendChild(path);
  }
  return svg;
}

/** Icon path data (24x24, stroked). */
export const ICONS = {
  lock: "M6 11h12v10H6z|M8.5 11V7.5a3.5 3.5 0 0 1 7 0V11",
  sale: "M3 12l9-9h9v9l-9 9z|M16.5 7.5h.01",
  key: "M14.5 9.5a4 4 0 1 1-1.2-2.8|M13.3 6.7L21 14.5V18h-3.5v-2.5H15V13l-1.7-1.7",
  alert: "M12 3l10 18H2z|M12 10v5|M12 18h.01",
  back: "M15 5l-7 7 7 7",
  server: "M4 4h16v6H4z|M4 14h16v6H4z|M8 7h.01|M8 17h.01",
} as const;
