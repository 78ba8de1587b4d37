// Renders an agent's transcript (chat.Message[]) readably: prompts,
// replies, tool calls with their results, messages between agents and task
// notifications as cards.

import { h, badge, cut } from "./dom.js";

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

/** block renders a text block that is one rendered inbox item. */
function userText(text, agentName) {
  const t = text.trim();
  if (t.startsWith("<task-notification")) {
    const g = tags(t.replace(/^<task-notification>|<\/task-notification>$/g, ""));
    const who = g.agent ? g.agent : g.kind === "shell" ? "shell task" : "task";
    const body = g.result !== undefined ? g.result : g["output-tail"] || "";
    return h(
      "div.entry.note",
      h(
        "div.entry-head",
        h("span.entry-kind", "notification"),
        h("span.mono", g.key || g["task-id"] || ""),
        h("span", who),
        g.status ? badge(g.status) : null,
        g["exit-code"] !== undefined ? h("span.muted", "exit " + g["exit-code"]) : null,
      ),
      body ? h("pre.entry-body", body) : null,
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
      ),
      h("pre.entry-body", m[2]),
    );
  }
  m = t.match(/^<(scheduled-wakeup|continuation)([^>]*)>\n?([\s\S]*?)\n?<\/\1>$/);
  if (m) {
    return h(
      "div.entry.msg",
      h("div.entry-head", h("span.entry-kind", m[1] === "continuation" ? "continuation" : "wake-up"), h("span.muted", Object.values(attrs(m[2])).join(" "))),
      h("pre.entry-body", m[3]),
    );
  }
  return h("div.entry.user", h("div.entry-head", h("span.entry-kind", agentName === "main" ? "prompt" : "task")), h("pre.entry-body", text));
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

/** collapsible shows long text folded, with its first lines as summary. */
function folded(text, cls) {
  const lines = text.split("\n");
  if (lines.length <= 8 && text.length <= 600) return h("pre.entry-body" + cls, text);
  return h("details.fold", h("summary", h("span.mono", cut(lines[0], 90)), h("span.muted", ` (${lines.length} lines)`)), h("pre.entry-body" + cls, text));
}

/** renderTranscript returns the entries of a transcript. */
export function renderTranscript(messages, agentName) {
  const out = [];
  const tools = new Map();
  for (const msg of messages || []) {
    for (const b of msg.content || []) {
      if (b.type === "text") {
        if (msg.role === "assistant") {
          out.push(h("div.entry.assistant", h("div.entry-head", h("span.entry-kind", agentName || "assistant")), h("pre.entry-body", b.text || "")));
        } else {
          out.push(userText(b.text || "", agentName));
        }
      } else if (b.type === "tool_use") {
        tools.set(b.id, b.name);
        out.push(
          h(
            "div.entry.tool",
            h("div.entry-head", h("span.entry-kind", "tool call"), h("span.tool-name", b.name), h("span.mono.muted", b.id || "")),
            h("pre.entry-body", toolInput(b.name, b.input)),
          ),
        );
      } else if (b.type === "tool_result") {
        const name = tools.get(b.tool_use_id) || "tool";
        out.push(
          h(
            "div.entry.result" + (b.is_error ? ".is-error" : ""),
            h("div.entry-head", h("span.entry-kind", b.is_error ? "tool error" : "result"), h("span.tool-name", name)),
            folded(resultText(b.content), ""),
          ),
        );
      }
    }
  }
  return out;
}
