// Renders an agent's transcript (chat.Message[]) readably: prompts,
// replies, tool calls with their results, messages between agents and task
// notifications as cards.

import { h, replace, badge, clock } from "./dom.js";
import { markdown } from "./markdown.js";

/** parseTags reads <tag>value</tag> pairs of a notification. */
function tags(s) {
  const out = {};
  const re = /<([a-z-]+)>([\s\S]*?)<\/\1>/g;
  let m;
  while ((m = re.exec(s))) if (!(m[1] in out)) out[m[1]] = m[2];
  return out;
}

function attrs(s) {
  const out = {};
  const re = /([a-z_-]+)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(s))) out[m[1]] = m[2].replace(/\\"/g, '"').replace(/\\\\/g, "\\");
  return out;
}

// stamp is an entry's time of day, with the full date as its title.
function stamp(at) {
  const t = at ? Date.parse(at) : NaN;
  if (!Number.isFinite(t)) return null;
  return h("time.entry-time", { datetime: at, title: new Date(t).toLocaleString() }, clock(at));
}

// userText renders a user-role text block: a prompt, or one rendered
// inbox item (a notification, a message, a wake-up, a continuation).
function userText(text, agentName, at, fo) {
  const t = text.trim();
  if (t.startsWith("<task-notification")) {
    const g = tags(t.replace(/^<task-notification>|<\/task-notification>$/g, ""));
    const who = g.agent ? g.agent : g.kind === "shell" ? "shell task" : "task";
    const reply = g.result !== undefined;
    const body = reply ? g.result : g["output-tail"] || "";
    return h(
      "div.entry.note",
      h(
        "div.entry-head",
        h("span.entry-kind", "notification"),
        h("span.mono", g.key || g["task-id"] || ""),
        h("span", who),
        g.status ? badge(g.status) : null,
        g["exit-code"] !== undefined ? h("span.muted", "exit " + g["exit-code"]) : null,
        stamp(at),
      ),
      // An agent's reply is Markdown; a shell task's output tail is not.
      body ? (reply && !long(body) ? markdown(body) : fold(body, fo)) : null,
      g["answered-messages"] ? h("div.entry-meta", "answers messages " + g["answered-messages"]) : null,
      g["live-tasks"] ? h("div.entry-meta", "still has live tasks: " + g["live-tasks"]) : null,
      g.error ? h("div.entry-meta.err", g.error) : null,
    );
  }
  let m = t.match(/^<agent-message([^>]*)>\n?([\s\S]*?)\n?<\/agent-message>$/);
  if (m) {
    const a = attrs(m[1]);
    return h(
      "div.entry.msg",
      h(
        "div.entry-head",
        h("span.entry-kind", "message"),
        h("span.mono", a.id || ""),
        h("span", "from " + (a.from || "?")),
        a.priority ? badge(a.priority, "prio") : null,
        stamp(at),
      ),
      long(m[2]) ? fold(m[2], fo) : markdown(m[2]),
    );
  }
  m = t.match(/^<(scheduled-wakeup|continuation)([^>]*)>\n?([\s\S]*?)\n?<\/\1>$/);
  if (m) {
    return h(
      "div.entry.msg",
      h("div.entry-head", h("span.entry-kind", m[1] === "continuation" ? "continuation" : "wake-up"), h("span.muted", Object.values(attrs(m[2])).join(" ")), stamp(at)),
      fold(m[3], fo),
    );
  }
  return h("div.entry.user", h("div.entry-head", h("span.entry-kind", agentName === "main" ? "prompt" : "task"), stamp(at)), fold(text, fo));
}

// long reports whether text is too long to show whole: it is folded, as
// plain text.
function long(text) {
  const s = String(text || "");
  return s.length > 2400 || s.split("\n").length > 40;
}

function toolInput(name, raw) {
  let v = raw;
  if (typeof raw === "string") {
    try {
      v = JSON.parse(raw);
    } catch {
      return raw;
    }
  }
  if (v && typeof v === "object") {
    if (name === "Bash" && v.command) return "$ " + v.command + (v.run_in_background ? "   (background)" : "");
    return Object.entries(v)
      .map(([k, x]) => k + ": " + (typeof x === "string" ? x : JSON.stringify(x)))
      .join("\n");
  }
  return JSON.stringify(v);
}

function resultText(content) {
  const s = String(content || "");
  try {
    const v = JSON.parse(s);
    if (v && typeof v === "object" && !Array.isArray(v)) {
      return Object.entries(v)
        .map(([k, x]) => k + ": " + (typeof x === "string" ? x : JSON.stringify(x)))
        .join("\n");
    }
  } catch {
    // not JSON: as it is
  }
  return s;
}

/**
 * fold shows a long text folded: its first and last lines, with a button
 * between them that shows the rest (and folds it again). Short text is a
 * plain pre. opts.key names the text in opts.open, a Set that keeps which
 * folds are open across re-renders; opts.cls is added to the pre.
 */
export function fold(text, opts = {}) {
  const cls = opts.cls || "";
  const s = String(text || "").replace(/\n$/, ""); // a final newline ends the last line
  const lines = s.split("\n");
  const head = opts.head || 6;
  const tail = opts.tail || 4;
  const longLines = lines.length > head + tail + 2;
  const longChars = s.length > 2400;
  if (!longLines && !longChars) return h("pre.entry-body" + cls, s);
  let first, last, hidden;
  if (longLines) {
    first = lines.slice(0, head).join("\n");
    last = lines.slice(-tail).join("\n");
    hidden = `${lines.length - head - tail} more lines`;
  } else {
    first = s.slice(0, 1200);
    last = s.slice(-600);
    hidden = `${s.length - 1800} more characters`;
  }
  const box = h("div.fold", { dataset: { lines: String(lines.length) } });
  const open = opts.open;
  const key = opts.key;
  const show = (expanded) => {
    if (open && key) {
      if (expanded) open.add(key);
      else open.delete(key);
    }
    box.dataset.open = expanded ? "yes" : "no";
    if (expanded) {
      replace(box, h("pre.entry-body" + cls, s), h("button.small.link-btn.fold-toggle", { type: "button", onclick: () => show(false) }, `fold (${lines.length} lines)`));
    } else {
      replace(
        box,
        h("pre.entry-body.fold-head" + cls, first),
        h("button.small.link-btn.fold-toggle", { type: "button", "aria-expanded": "false", onclick: () => show(true) }, `⋯ ${hidden} — show all`),
        h("pre.entry-body.fold-tail" + cls, last),
      );
    }
  };
  show(!!(open && key && open.has(key)));
  return box;
}

/**
 * renderTranscript returns the entries of a transcript. opts.times holds
 * the time of each block (text, tool call, tool result, in order; missing
 * ones are not shown); opts.open is the Set of open folds, kept across
 * renders.
 */
export function renderTranscript(messages, agentName, opts = {}) {
  const out = [];
  const tools = new Map();
  const times = opts.times || [];
  let k = -1;
  for (const msg of messages || []) {
    for (const b of msg.content || []) {
      if (b.type !== "text" && b.type !== "tool_use" && b.type !== "tool_result") continue;
      k++;
      const at = times[k];
      const fo = { open: opts.open, key: `${k}` };
      if (b.type === "text") {
        if (msg.role === "assistant") {
          const text = b.text || "";
          out.push(h("div.entry.assistant", { dataset: { block: String(k) } }, h("div.entry-head", h("span.entry-kind", agentName || "assistant"), stamp(at)), long(text) ? fold(text, fo) : markdown(text)));
        } else {
          const e = userText(b.text || "", agentName, at, fo);
          e.dataset.block = String(k);
          out.push(e);
        }
      } else if (b.type === "tool_use") {
        tools.set(b.id, b.name);
        out.push(
          h(
            "div.entry.tool",
            { dataset: { block: String(k) } },
            h("div.entry-head", h("span.entry-kind", "tool call"), h("span.tool-name", b.name), h("span.mono.muted", b.id || ""), stamp(at)),
            fold(toolInput(b.name, b.input), fo),
          ),
        );
      } else {
        const name = tools.get(b.tool_use_id) || "tool";
        out.push(
          h(
            "div.entry.result" + (b.is_error ? ".is-error" : ""),
            { dataset: { block: String(k) } },
            h("div.entry-head", h("span.entry-kind", b.is_error ? "tool error" : "result"), h("span.tool-name", name), stamp(at)),
            fold(resultText(b.content), fo),
          ),
        );
      }
    }
  }
  return out;
}

/**
 * blockTimes aligns an agent's transcript export (JSONL lines, as
 * GET .../agents/{agent}/transcript writes them) with its transcript's
 * blocks, from the newest back, and returns each block's timestamp. It
 * stops at the first block that does not match its line (a compaction
 * replaced the older ones), so no block gets another's time.
 */
export function blockTimes(messages, jsonl) {
  const blocks = [];
  for (const msg of messages || []) {
    for (const b of msg.content || []) {
      if (b.type === "text" || b.type === "tool_use" || b.type === "tool_result") blocks.push({ role: msg.role, b });
    }
  }
  const lines = [];
  for (const raw of String(jsonl || "").split("\n")) {
    if (!raw.trim()) continue;
    let l;
    try {
      l = JSON.parse(raw);
    } catch {
      continue;
    }
    if (l && (l.type === "user" || l.type === "assistant" || l.type === "tool_use" || l.type === "tool_result")) lines.push(l);
  }
  const times = new Array(blocks.length);
  let i = blocks.length - 1;
  let j = lines.length - 1;
  for (; i >= 0 && j >= 0; i--, j--) {
    const { role, b } = blocks[i];
    const l = lines[j];
    let same = false;
    if (b.type === "text") same = l.type === role && (l.content || "") === (b.text || "");
    else if (b.type === "tool_use") same = l.type === "tool_use" && l.tool_use_id === b.id;
    else same = l.type === "tool_result" && l.tool_use_id === b.tool_use_id;
    if (!same) break;
    times[i] = l.timestamp;
  }
  return times;
}
