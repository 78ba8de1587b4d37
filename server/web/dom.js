// Small DOM and formatting helpers. Everything the server sends is put in
// the page as text, never as HTML.

/**
 * h builds an element: h("div.card#main", {onclick, dataset, ...}, ...children).
 * Children may be strings, numbers, nodes, arrays, null or false.
 */
export function h(spec, attrs, ...children) {
  if (attrs === null || typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs)) {
    children.unshift(attrs);
    attrs = {};
  }
  const m = spec.match(/^([a-z0-9-]*)((?:[.#][\w-]+)*)$/i);
  const tag = (m && m[1]) || "div";
  const el = document.createElement(tag);
  if (m && m[2]) {
    for (const part of m[2].match(/[.#][\w-]+/g)) {
      if (part[0] === ".") el.classList.add(part.slice(1));
      else el.id = part.slice(1);
    }
  }
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "class") el.className += (el.className ? " " : "") + v;
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false || c === "") continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** replace puts children in place of el's content. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** badge is a coloured state label; the colour follows the text. */
export function badge(text, kind) {
  const k = String(kind || text || "").toLowerCase().replace(/[^a-z-]/g, "");
  return h("span.badge", { class: "b-" + k, dataset: { state: text } }, text);
}

const units = [
  [86400, "d"],
  [3600, "h"],
  [60, "m"],
  [1, "s"],
];

/** dur formats milliseconds: 850ms, 4.2s, 3m 10s, 2h 5m. */
export function dur(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "";
  if (ms < 0) ms = 0;
  if (ms < 1000) return Math.round(ms) + "ms";
  if (ms < 10000) return (ms / 1000).toFixed(1) + "s";
  let s = Math.floor(ms / 1000);
  const out = [];
  for (const [n, u] of units) {
    if (s >= n) {
      out.push(Math.floor(s / n) + u);
      s %= n;
    }
    if (out.length === 2) break;
  }
  return out.join(" ");
}

/** time parses an RFC 3339 time; zero times are null. */
export function time(s) {
  if (!s || s.startsWith("0001-")) return null;
  const t = Date.parse(s);
  return Number.isFinite(t) ? t : null;
}

/** ago is "12s ago" for a time, "" for none. */
export function ago(s, now = Date.now()) {
  const t = time(s);
  if (t === null) return "";
  const d = now - t;
  if (d < 1500) return "just now";
  return dur(d) + " ago";
}

/** clock is a local wall-clock time of day. */
export function clock(s) {
  const t = time(s);
  if (t === null) return "";
  return new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** cut shortens s to n characters. */
export function cut(s, n) {
  s = String(s || "");
  return s.length <= n ? s : s.slice(0, n - 1) + "…";
}

/** live is an element whose text is the time since `since`, ticked by the page. */
export function since(s, prefix = "") {
  const t = time(s);
  if (t === null) return h("span");
  return h("span.tick", { dataset: { since: String(t), prefix } }, prefix + dur(Date.now() - t));
}

/** agoTick is an element whose text is "… ago", ticked by the page. */
export function agoTick(s) {
  const t = time(s);
  if (t === null) return h("span.muted", "never");
  return h("span.tick", { dataset: { ago: String(t) }, title: new Date(t).toLocaleString() }, ago(s));
}

/** tick refreshes every ticking element under root. */
export function tick(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll(".tick")) {
    if (el.dataset.since) el.textContent = (el.dataset.prefix || "") + dur(now - Number(el.dataset.since));
    else if (el.dataset.ago) {
      const d = now - Number(el.dataset.ago);
      el.textContent = d < 1500 ? "just now" : dur(d) + " ago";
    }
  }
}

/** debounce calls fn once after calls stop for wait ms, and at least every max ms. */
export function debounce(fn, wait, max) {
  let t = null;
  let first = 0;
  return () => {
    const now = Date.now();
    if (t === null) first = now;
    clearTimeout(t);
    const delay = Math.max(0, Math.min(wait, first + max - now));
    t = setTimeout(() => {
      t = null;
      fn();
    }, delay);
  };
}
