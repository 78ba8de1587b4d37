// vigil web UI: the sessions list and the session page, updated live from
// the server's event streams. No build step: plain ES modules served by the
// vigil binary.

import { api, apiText, ApiError, EventStream, initToken, tokenFromHash, hasToken, setToken, forgetToken, onUnauthorized } from "./api.js";
import { h, replace, badge, dur, time, clock, cut, since, agoTick, tick, debounce } from "./dom.js";
import { renderTranscript, blockTimes, fold } from "./transcript.js";
import { markdown } from "./markdown.js";

const $ = (sel, root = document) => root.querySelector(sel);
const app = $("#app");
const conn = $("#conn");
const enc = encodeURIComponent;

let view = null; // the current view: {start, stop, route?}
let connTimer = null;

// ---------------------------------------------------------------- chrome

/** toast shows a short notice; errors stay until clicked. */
function toast(text, kind = "info") {
  const el = h("div.toast.t-" + kind, { role: kind === "error" ? "alert" : "status", onclick: () => el.remove() }, text);
  $("#toasts").appendChild(el);
  if (kind !== "error") setTimeout(() => el.remove(), 5000);
  else setTimeout(() => el.remove(), 15000);
}

function errText(e) {
  if (e instanceof ApiError) return (e.code ? e.code + ": " : "") + e.message;
  return String((e && e.message) || e);
}

/** setConn shows the event stream's state in the header. */
function setConn(state, info = {}) {
  clearInterval(connTimer);
  conn.className = "conn c-" + state;
  conn.dataset.state = state;
  conn.title = info.reason ? "last error: " + info.reason : "";
  if (state === "live") conn.textContent = "live";
  else if (state === "connecting") conn.textContent = "connecting…";
  else if (state === "reconnecting") {
    const show = () => {
      const left = info.until ? Math.max(0, Math.ceil((info.until - Date.now()) / 1000)) : 0;
      conn.textContent = left > 0 ? `reconnecting… retry in ${left}s` : "reconnecting…";
    };
    show();
    if (info.until) connTimer = setInterval(show, 500);
  } else conn.textContent = "";
}

// Back online: reconnect now rather than wait out the backoff.
window.addEventListener("online", () => {
  if (view && view.stream) view.stream.retryNow();
});

// Ctrl+Enter (or Cmd+Enter) in a text area submits its form.
document.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target instanceof HTMLTextAreaElement && e.target.form) {
    e.preventDefault();
    e.target.form.requestSubmit();
  }
});

conn.addEventListener("click", () => {
  if (view && view.stream && view.stream.state === "reconnecting") view.stream.retryNow();
});

$("#forget").addEventListener("click", () => {
  forgetToken();
  route();
});

onUnauthorized(() => {
  if (view) view.stop();
  view = null;
  showTokenForm("The server refused the token. Paste the current one (vigil serve prints it; it is kept in <data>/token).");
});

// ---------------------------------------------------------------- token

function showTokenForm(note) {
  setConn("");
  $("#forget").hidden = true;
  const input = h("input#token-input", { type: "password", autocomplete: "off", placeholder: "bearer token", required: true, "aria-label": "API token" });
  replace(
    app,
    h(
      "section.card.narrow",
      h("h1", "Connect to vigil"),
      h("p.muted", note || "Open the address vigil serve printed (it carries the token), or paste the token here. It is kept in this browser only."),
      h(
        "form.stack#token-form",
        {
          onsubmit: (ev) => {
            ev.preventDefault();
            setToken(input.value);
            route();
          },
        },
        input,
        h("div", h("button.primary", { type: "submit" }, "Connect")),
      ),
    ),
  );
  input.focus();
}

// ---------------------------------------------------------------- router

function route() {
  $("#toasts").replaceChildren();
  if (tokenFromHash() && view) {
    // A new token: start over with it.
    view.stop();
    view = null;
  }
  if (!hasToken()) {
    if (view) view.stop();
    view = null;
    showTokenForm();
    return;
  }
  $("#forget").hidden = false;
  const path = location.hash.replace(/^#/, "") || "/";
  const m = path.match(/^\/s\/([^/]+)(?:\/([^/]+))?$/);
  if (m) {
    const id = decodeURIComponent(m[1]);
    const agent = m[2] ? decodeURIComponent(m[2]) : "";
    if (view && view.kind === "session" && view.id === id) {
      view.select(agent);
      return;
    }
    if (view) view.stop();
    view = new SessionView(id, agent);
  } else {
    if (view && view.kind === "list") {
      view.routeChanged();
      return;
    }
    if (view) view.stop();
    view = new ListView();
  }
  view.start();
}

window.addEventListener("hashchange", route);
setInterval(() => tick(), 1000);

// ---------------------------------------------------------------- shared

const stateOrder = { running: 0, waiting: 1, idle: 2, closed: 3 };

/** sessionState is running, waiting, idle or closed, from a SessionDetail. */
function sessionState(d) {
  if (d.session.closed) return "closed";
  if (d.agents.some((a) => a.state === "running")) return "running";
  if (d.agents.some((a) => a.state === "waiting")) return "waiting";
  return "idle";
}

function field(label, control, hint) {
  return h("label.field", h("span.label", label), control, hint ? h("span.hint", hint) : null);
}

function select(name, options, value) {
  return h(
    "select",
    { name },
    options.map(([v, label]) => h("option", { value: v, selected: v === value }, label)),
  );
}

// Short labels: a phone shows them whole. The select's title says more.
const priorities = [
  ["next", "next round"],
  ["now", "now — interrupt"],
  ["later", "later — after the turn"],
];
const priorityHelp = "next: joins the running turn at its next model round · now: interrupts the round in flight · later: waits for the turn to end";

/**
 * menu is an overflow menu: a "⋯" button that opens a list of actions.
 * key names it, so that an open menu stays open across live re-renders
 * (openMenus holds the open ones' keys); choosing an item closes it.
 */
function menu(key, openMenus, items, label = "More actions") {
  const list = items.filter(Boolean);
  if (list.length === 0) return null;
  const d = h(
    "details.menu",
    {
      dataset: { menu: key },
      open: openMenus.has(key),
      onclick: (e) => e.stopPropagation(),
      onkeydown: (e) => e.stopPropagation(),
      ontoggle: () => {
        if (d.open) {
          // One menu open at a time.
          for (const o of document.querySelectorAll("details.menu[open]")) if (o !== d) o.open = false;
          openMenus.clear();
          openMenus.add(key);
        } else openMenus.delete(key);
      },
    },
    h("summary.menu-btn", { title: label, "aria-label": label, role: "button" }, "⋯"),
    h(
      "div.menu-pop",
      { role: "menu" },
      list.map((it) => {
        const b = h("button.menu-item" + (it.cls ? "." + it.cls : "") + (it.danger ? ".danger" : ""), { type: "button", role: "menuitem" }, it.label);
        b.addEventListener("click", (e) => {
          d.open = false;
          it.run(e, b);
        });
        return b;
      }),
    ),
  );
  return d;
}

// A click outside an open menu closes it.
document.addEventListener("click", (e) => {
  for (const d of document.querySelectorAll("details.menu[open]")) if (!d.contains(e.target)) d.open = false;
});
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape") for (const d of document.querySelectorAll("details.menu[open]")) d.open = false;
});

/** busy disables a button while fn runs. */
async function busy(btn, fn) {
  if (btn) btn.disabled = true;
  try {
    return await fn();
  } finally {
    if (btn) btn.disabled = false;
  }
}

// ---------------------------------------------------------------- sessions list

class ListView {
  constructor() {
    this.kind = "list";
    this.details = new Map();
    this.dirty = new Set();
    this.rows = [];
    this.showClosed = false;
    this.needsOnly = ListView.wantsNeedsOnly();
    this.refresh = debounce(() => this.load(), 300, 1500);
  }

  // wantsNeedsOnly reads the filter from the address: #/?needs_you=1.
  static wantsNeedsOnly() {
    const q = location.hash.replace(/^#\/?/, "").split("?")[1] || "";
    return new URLSearchParams(q).get("needs_you") === "1";
  }

  // routeChanged follows a new address of the list: the filter may have changed.
  routeChanged() {
    const want = ListView.wantsNeedsOnly();
    if (want === this.needsOnly) return;
    this.needsOnly = want;
    this.render();
    this.load();
  }

  start() {
    document.title = "vigil — sessions";
    this.list = h("div.sessions#sessions", h("p.muted", "Loading…"));
    this.count = h("span.muted");
    this.needsBtn = h(
      "button.small.needs-filter#needs-you-filter",
      {
        type: "button",
        title: "Show only the sessions where a person must act: approvals, failed runs, budget stops",
        onclick: () => {
          location.hash = this.needsOnly ? "#/" : "#/?needs_you=1";
        },
      },
      "needs you",
    );
    const closedToggle = h("input", {
      type: "checkbox",
      onchange: (e) => {
        this.showClosed = e.target.checked;
        this.render();
      },
    });
    replace(
      app,
      h("div.list-page", h("section.card", h("div.card-head", h("h2", "Sessions ", this.count), this.needsBtn, h("label.check", closedToggle, " show closed")), this.list), this.newSessionForm()),
    );
    this.load();
    // Every session's events from now on: a change of any session
    // refreshes its row. The stream starts when it connects, after the
    // first load began: once live, every row is read again, so that
    // nothing committed in between is missed.
    this.stream = new EventStream("/api/events", {
      onEvent: (ev) => {
        if (ev && ev.live) return; // streamed text changes no row
        if (ev && ev.session) this.dirty.add(ev.session);
        this.refresh();
      },
      onState: (state, info) => {
        setConn(state, info);
        if (state === "live" && info.connects === 1) {
          for (const r of this.rows) this.dirty.add(r.id);
          this.refresh();
        }
      },
    }).start();
  }

  stop() {
    if (this.stream) this.stream.stop();
  }

  newSessionForm() {
    const form = h(
      "form.stack#new-session",
      {
        onsubmit: async (ev) => {
          ev.preventDefault();
          const f = new FormData(form);
          const body = {};
          for (const k of ["prompt", "title", "provider", "model", "subagent_model", "cwd"]) {
            const v = String(f.get(k) || "").trim();
            if (v) body[k] = v;
          }
          const list = (k) =>
            String(f.get(k) || "")
              .split(/[\n,]/)
              .map((s) => s.trim())
              .filter(Boolean);
          if (list("dirs").length) body.dirs = list("dirs");
          const mode = String(f.get("mode") || "");
          const allow = list("allow");
          const deny = list("deny");
          if (mode || allow.length || deny.length) body.permissions = { mode: mode || "ask", allow, deny };
          const btn = form.querySelector("button[type=submit]");
          await busy(btn, async () => {
            try {
              const d = await api("POST", "/api/sessions", body);
              location.hash = "#/s/" + enc(d.session.id);
            } catch (e) {
              toast("Could not start the session: " + errText(e), "error");
            }
          });
        },
      },
      field("Prompt", h("textarea", { name: "prompt", rows: 3, placeholder: "What should the main agent do?" })),
      h(
        "div.row4",
        field("Provider", h("input", { name: "provider", placeholder: "server default", autocomplete: "off" })),
        field("Model", h("input", { name: "model", placeholder: "provider default", autocomplete: "off" })),
        field("Working directory", h("input", { name: "cwd", placeholder: "server's directory", autocomplete: "off" })),
        field(
          "Permission mode",
          select(
            "mode",
            [
              ["", "server default"],
              ["ask", "ask — a person answers"],
              ["accept-edits", "accept-edits"],
              ["auto", "auto — rules decide, rest denied"],
              ["bypass", "bypass — allow everything"],
            ],
            "",
          ),
        ),
      ),
      h(
        "details.more",
        h("summary", "More options"),
        h(
          "div.row4",
          field("Title", h("input", { name: "title", placeholder: "first line of the prompt" })),
          field("Subagent model", h("input", { name: "subagent_model", placeholder: "same as model" })),
          field("Allow rules", h("input", { name: "allow", placeholder: "Bash(go test *), Read" })),
          field("Deny rules", h("input", { name: "deny", placeholder: "Bash(rm *)" })),
          field("Extra directories", h("input", { name: "dirs", placeholder: "/path/one, /path/two" })),
        ),
      ),
      h("div", h("button.primary", { type: "submit" }, "Start session")),
    );
    return h("section.card", h("h2", "New session"), form);
  }

  async load() {
    let rows;
    try {
      rows = (await api("GET", "/api/sessions" + (this.needsOnly ? "?needs_you=1" : ""))).sessions;
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) replace(this.list, h("p.err", "Could not list sessions: " + errText(e)));
      return;
    }
    this.rows = rows;
    // The list row has no agent states: read each open session's detail,
    // on first sight and when its events say it changed.
    const need = rows.filter((r) => !r.closed && (!this.details.has(r.id) || this.dirty.has(r.id)));
    this.dirty.clear();
    const queue = need.slice(0, 50);
    const workers = Array.from({ length: 4 }, async () => {
      while (queue.length) {
        const r = queue.shift();
        try {
          this.details.set(r.id, await api("GET", "/api/sessions/" + enc(r.id)));
        } catch {
          this.details.delete(r.id);
        }
      }
    });
    await Promise.all(workers);
    this.render();
  }

  render() {
    const needs = (r) => (r.needs_you || []).length > 0;
    const rows = this.rows.filter((r) => (this.showClosed || !r.closed) && (!this.needsOnly || needs(r)));
    // Sessions that need a person first, then the most recently active.
    rows.sort((a, b) => needs(b) - needs(a) || (time(b.updated) || 0) - (time(a.updated) || 0));
    const waiting = this.rows.filter((r) => !r.closed && needs(r)).length;
    this.count.textContent = `${rows.length}${this.showClosed ? "" : " open"}`;
    this.needsBtn.classList.toggle("on", this.needsOnly);
    this.needsBtn.setAttribute("aria-pressed", this.needsOnly ? "true" : "false");
    replace(this.needsBtn, this.needsOnly ? "✓ " : "", "needs you", waiting ? h("span.count", String(waiting)) : null);
    if (rows.length === 0) {
      let empty = this.rows.length ? "No open sessions. Tick “show closed” to see the others." : "No sessions yet. Start one with the form.";
      if (this.needsOnly) empty = "No session needs you.";
      replace(this.list, h("p.muted.empty", empty));
      return;
    }
    replace(
      this.list,
      rows.map((r) => {
        const d = this.details.get(r.id);
        const st = r.closed ? "closed" : d ? sessionState(d) : "idle";
        const running = d ? d.agents.filter((a) => a.state === "running" || a.state === "waiting").length : 0;
        const agents = d ? d.agents.length : null;
        const why = r.needs_you || [];
        return h(
          "a.session-row" + (why.length ? ".needs" : ""),
          { href: "#/s/" + enc(r.id), dataset: { session: r.id, state: st, needsYou: why.length ? "yes" : "no" } },
          h("div.sr-main", h("span.sr-title", r.title || "(untitled)"), h("span.mono.muted", r.id)),
          why.length ? h("div.sr-needs", h("span.badge.b-needs-you.needs-you", "needs you"), h("span.needs-list", why.join(" · "))) : null,
          h(
            "div.sr-meta",
            badge(st),
            d && d.hold ? badge("held") : null,
            agents !== null ? h("span", `${running} of ${agents} agent${agents === 1 ? "" : "s"} running`) : null,
            r.provider || r.model ? h("span.muted", [r.provider, r.model].filter(Boolean).join(" · ")) : null,
            h("span.muted", "active ", agoTick(r.updated)),
          ),
        );
      }),
    );
  }
}

// ---------------------------------------------------------------- session page

// A task can be stopped while it runs: a shell process, or a subagent's run.
const liveTask = (t) => t.status === "running" || t.status === "stopping";

// localTimes rewrites the UTC times in a server's text as local times.
const localTimes = (s) => String(s || "").replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z/g, (t) => clock(t));

function outcomeDetail(m, agents) {
  const a = agents.find((x) => x.id === m.to);
  const name = a ? a.name : m.to;
  const key = (run) => (a && a.task ? `${a.task}#${run}` : "");
  let s = "";
  switch (m.outcome) {
    case "rejected":
      s = "Not delivered: " + (m.reason || "no reason given");
      break;
    case "joined":
      s = `${name} is in run ${m.run}, which will see the message at its next model round.`;
      if (key(m.run)) s += ` Its reply comes in notification ${key(m.run)}.`;
      break;
    case "queued-behind-stop":
      s = `${name} was finishing run ${m.run} when the message arrived; run ${m.run + 1} will answer it.`;
      if (key(m.run)) s += ` Two notifications follow: ${key(m.run)} for the stopping run, then ${key(m.run + 1)} with the answer.`;
      break;
    case "resumed":
      s = `${name} was idle; run ${m.run} started with the message.`;
      if (key(m.run)) s += ` Its reply comes in notification ${key(m.run)}.`;
      break;
    case "pending":
      s = `${name}'s model round is in flight; its answer decides between joined and queued-behind-stop.`;
      break;
  }
  if (m.answered_by) s += ` Answered by run ${m.answered_by}.`;
  return s;
}

function eventSummary(ev, names) {
  const d = ev.data || {};
  const n = (id) => (id && names.get(id)) || id || "";
  switch (ev.type) {
    case "session.created":
      return "session created" + (d.session && d.session.title ? ": " + d.session.title : "");
    case "session.closed":
      return "session closed" + (d.reason ? ": " + d.reason : "");
    case "hold.set":
      return `user queue held by ${d.by || "the user"}${d.reason ? ": " + d.reason : ""}`;
    case "hold.released":
      return `user queue resumed by ${d.by || "the user"}`;
    case "agent.created":
      return d.agent ? `agent ${d.agent.name} (${d.agent.id}) created` : "agent created";
    case "agent.closed":
      return `agent ${n(d.agent)} closed${d.reason ? ": " + d.reason : ""}`;
    case "task.started":
      return d.task ? `task ${d.task.id} (${d.task.kind}) started${d.task.command ? ": " + cut(d.task.command, 60) : ""}` : "task started";
    case "task.updated":
      return `task ${d.task} ${d.status}${d.exit_code !== undefined && d.exit_code !== null ? " (exit " + d.exit_code + ")" : ""}`;
    case "item.enqueued":
      return d.item ? `${d.item.kind} ${d.item.id} → ${n(d.item.agent)} (${d.item.priority})` : "item enqueued";
    case "item.removed":
      return `item ${d.item} removed from ${n(d.agent)}: ${d.reason || ""}`;
    case "item.moved":
      return `item ${d.item} moved to ${d.index}`;
    case "run.started":
      return `${n(d.agent)} run ${d.seq} started (${d.kind})`;
    case "run.ended":
      return `${n(d.agent)} run ${d.seq} ${d.status}`;
    case "items.joined":
      return `${(d.items || []).length} item(s) joined ${n(d.agent)} run ${d.seq}`;
    case "transcript.appended":
      return `${n(d.agent)} transcript + ${d.message ? d.message.role : "message"}`;
    case "model.started":
    case "model.dispatched":
    case "model.ended":
    case "model.retrying":
      return `${n(d.agent)} model call ${d.call || ""} ${ev.type.slice(6)}${d.outcome ? " " + d.outcome : ""}${d.reason ? ": " + d.reason : ""}`;
    case "tool.started":
      return `${n(d.agent)} tool ${d.call ? d.call.name : ""} started`;
    case "tool.waiting":
      return `${n(d.agent)} tool waits (${d.wait})`;
    case "tool.finished":
      return `${n(d.agent)} tool finished${d.is_error ? " with an error" : ""}`;
    case "notification.written":
      return d.note ? `notification ${d.note.key} → ${n(d.note.owner)} (${d.note.status})` : "notification written";
    case "notification.dropped":
      return `notification ${d.key} dropped: ${d.reason}`;
    case "message.sent":
      return d.msg ? `message ${d.msg.id} ${n(d.msg.from)} → ${n(d.msg.to)}: ${d.msg.outcome}` : "message sent";
    case "message.resolved":
      return `message ${d.msg}: ${d.outcome}${d.run ? " (run " + d.run + ")" : ""}`;
    case "approval.requested":
      return d.approval ? `permission request ${d.approval.id}: ${d.approval.tool}` : "permission requested";
    case "approval.resolved":
      return `permission ${d.approval} ${d.allow ? "allowed" : "denied"}${d.by ? " by " + d.by : ""}`;
    case "dropped":
      return `DROPPED ${d.what}: ${d.reason}`;
    default:
      return ev.type;
  }
}

class SessionView {
  constructor(id, agent) {
    this.kind = "session";
    this.id = id;
    this.base = "/api/sessions/" + enc(id);
    this.selected = agent || "a0";
    this.detail = null;
    this.agentDetail = null;
    this.runs = [];
    this.msgs = [];
    this.loading = false;
    this.again = false;
    this.transcriptKey = "";
    this.events = 0;
    this.lastSeq = null;
    this.names = new Map();
    this.refresh = debounce(() => this.load(), 150, 600);
    this.output = null; // the open task-output dialog
    this.openMenus = new Set(); // keys of the open overflow menus
    this.folds = new Map(); // agent id -> Set of its transcript's open folds
    this.times = { key: "", times: [] }; // the selected transcript's block times
    // Streamed text: agent id -> {call, run, name, text, staleAt}. An
    // entry goes stale when a committed event ends the agent's round, and
    // is dropped once a load begun after that event has rendered the
    // committed transcript, so the text never blinks out in between.
    this.live = new Map();
    this.committed = 0; // committed events seen
    this.liveTimer = null;
    this.liveTails = new Map(); // agent id -> its tree node's live-text line
  }

  start() {
    document.title = "vigil — " + this.id;
    this.el = {
      head: h("section.card.session-head#session-head"),
      banners: h("div.banners#banners"),
      tree: h("div#tree", h("p.muted", "Loading…")),
      transcriptHead: h("div.card-head"),
      transcript: h("div.transcript#transcript"),
      live: h("div.entry.assistant.live#live-text", { hidden: true, "aria-live": "off" }),
      activity: h("div.activity#activity"),
      inbox: h("div#inbox"),
      messages: h("div#messages"),
      runs: h("div#runs"),
      eventCount: h("span.muted#event-count", "0 events"),
      events: h("ol.events#events"),
    };
    const e = this.el;
    replace(
      app,
      h(
        "div.session",
        e.head,
        e.banners,
        h(
          "div.grid",
          h(
            "div.col.col-side",
            h("section.card.o1#tree-card", h("div.card-head", h("h2", "Agents & tasks")), e.tree),
            this.messageForm(),
            h("section.card.o5#inbox-card", h("div.card-head", h("h2", "Inbox")), e.inbox),
            h("section.card.o6#messages-card", h("div.card-head", h("h2", "Messages")), e.messages),
          ),
          h(
            "div.col.col-main",
            h("section.card.o2#transcript-card", e.transcriptHead, e.transcript, e.live, e.activity),
            this.promptForm(),
            h("section.card.o7#runs-card", h("div.card-head", h("h2", "Run history")), e.runs),
            h("section.card.o8#events-card", h("details#event-log", h("summary", h("h2.inline", "Event log"), " ", e.eventCount), e.events)),
          ),
        ),
      ),
    );
    this.load().then(() => {
      if (this.stopped) return;
      // Follow the session's events from a little before the state just
      // read, so the log shows recent history; every event refreshes the
      // page (debounced).
      const after = this.detail ? Math.max(0, this.detail.seq - 100) : 0;
      this.stream = new EventStream(this.base + "/events", {
        after,
        onEvent: (ev, id) => this.onEvent(ev, id),
        onState: setConn,
      }).start();
    });
  }

  stop() {
    this.stopped = true;
    if (this.stream) this.stream.stop();
    if (this.output) this.output.close();
  }

  select(agent) {
    this.selected = agent || "a0";
    this.transcriptKey = "";
    this.load();
  }

  onEvent(ev, id) {
    if (ev && ev.live) {
      this.onLive(ev);
      return;
    }
    this.committed++;
    const d0 = (ev && ev.data) || {};
    if ((ev.type === "model.ended" || ev.type === "run.ended" || ev.type === "agent.closed") && d0.agent) {
      const e = this.live.get(d0.agent);
      if (e && !e.staleAt) e.staleAt = this.committed;
    }
    this.events++;
    if (ev.type === "agent.created" && ev.data && ev.data.agent) this.names.set(ev.data.agent.id, ev.data.agent.name);
    const seq = ev.seq !== undefined ? ev.seq : id;
    const row = h(
      "li",
      { dataset: { seq: String(seq), type: ev.type } },
      h("span.ev-seq.mono", "#" + seq),
      h("span.ev-time.mono.muted", clock(ev.at)),
      h("span.ev-type.mono", ev.type),
      h("span.ev-text", eventSummary(ev, this.names)),
    );
    const list = this.el.events;
    list.prepend(row);
    while (list.childElementCount > 400) list.lastElementChild.remove();
    this.lastSeq = seq;
    this.el.eventCount.textContent = `${this.events} received · last #${seq}`;
    this.refresh();
  }

  // onLive takes a live event: a text delta of an agent's model round.
  onLive(ev) {
    if (ev.type !== "text.delta") return;
    const d = ev.data || {};
    if (!d.agent || typeof d.text !== "string") return;
    let e = this.live.get(d.agent);
    if (!e || e.call !== d.call || e.staleAt) {
      e = { call: d.call, run: d.run, name: d.name || this.names.get(d.agent) || d.agent, text: "", staleAt: 0, at: Date.now() };
      this.live.set(d.agent, e);
    }
    e.text += d.text;
    // Bounded: a runaway round keeps its last 64 KiB on the page.
    if (e.text.length > 65536) e.text = "…" + e.text.slice(-65536);
    if (!this.liveTimer) this.liveTimer = setTimeout(() => this.renderLive(), 40);
  }

  // renderLive shows the streamed text: in full under the selected
  // agent's transcript, and its last line in the tree.
  renderLive() {
    this.liveTimer = null;
    if (!this.el) return;
    const sel = this.agentDetail && this.agentDetail.id;
    const e = sel ? this.live.get(sel) : null;
    if (e) {
      const follow = this.el.transcript.scrollHeight - this.el.transcript.scrollTop - this.el.transcript.clientHeight < 40;
      this.el.live.hidden = false;
      this.el.live.dataset.agent = e.name;
      this.el.live.dataset.call = e.call || "";
      replace(
        this.el.live,
        h("div.entry-head", h("span.entry-kind", e.name), h("span.badge.b-streaming", "streaming"), e.run ? h("span.muted", "run " + e.run) : null, h("span.spinner")),
        markdown(e.text),
      );
      if (follow) this.el.transcript.scrollTop = this.el.transcript.scrollHeight;
    } else {
      this.el.live.hidden = true;
      this.el.live.replaceChildren();
    }
    for (const [id, el] of this.liveTails) {
      const x = this.live.get(id);
      // The last line as words: without the Markdown marks of a list
      // item, a heading or a quote, and without emphasis and code marks.
      const last = x
        ? x.text
            .trimEnd()
            .split("\n")
            .pop()
            .replace(/^\s*(?:[-*+]|\d+[.)]|#{1,6}|>)\s+/, "")
            .replace(/\*\*|__|`/g, "")
        : "";
      el.hidden = !x;
      el.textContent = x ? "“" + cut(last.slice(-160), 120) + "”" : "";
    }
  }

  async load() {
    if (this.loading) {
      this.again = true;
      return;
    }
    this.loading = true;
    const seen = this.committed;
    try {
      const b = this.base;
      const [detail, runs, msgs] = await Promise.all([api("GET", b), api("GET", b + "/runs"), api("GET", b + "/messages")]);
      this.detail = detail;
      for (const a of detail.agents) this.names.set(a.id, a.name);
      const sel = detail.agents.find((a) => a.id === this.selected || a.name === this.selected) || detail.agents[0];
      this.agentDetail = sel ? await api("GET", b + "/agents/" + enc(sel.id)) : null;
      if (this.agentDetail) await this.loadTimes(this.agentDetail);
      this.runs = runs.runs;
      this.msgs = msgs.messages;
      // Streamed text that a committed event ended before this load began
      // is in the transcript now.
      for (const [id, e] of this.live) if (e.staleAt && e.staleAt <= seen) this.live.delete(id);
      this.render();
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        replace(app, h("section.card.narrow", h("h1", "No such session"), h("p", errText(e)), h("a", { href: "#/" }, "All sessions")));
        this.stop();
      } else if (!(e instanceof ApiError && e.status === 401)) {
        toast("Could not load the session: " + errText(e), "error");
      }
    } finally {
      this.loading = false;
      if (this.again) {
        this.again = false;
        this.refresh();
      }
    }
  }

  // loadTimes reads when each block of the agent's transcript was written
  // (from its JSONL export), once per change of the transcript.
  async loadTimes(a) {
    const t = a.transcript || [];
    const key = `${a.id}:${t.length}:${t.length ? JSON.stringify(t[t.length - 1]).length : 0}`;
    if (this.times.key === key) return;
    try {
      const jsonl = await apiText(`${this.base}/agents/${enc(a.id)}/transcript`);
      this.times = { key, times: blockTimes(t, jsonl) };
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) throw e;
      this.times = { key, times: [] }; // no times rather than no transcript
    }
  }

  // act runs an action and refreshes; errors show as a toast.
  async act(btn, what, fn) {
    return busy(btn, async () => {
      try {
        const r = await fn();
        this.refresh();
        return r;
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 401)) toast(what + " failed: " + errText(e), "error");
        return undefined;
      }
    });
  }

  render() {
    const d = this.detail;
    this.renderHead(d);
    this.renderBanners(d);
    this.renderTree(d);
    this.renderTranscript();
    this.renderInbox(d);
    this.renderMessages(d);
    this.renderRuns();
    this.updateForms(d);
    this.renderLive();
    if (this.output) this.output.refresh(d);
    tick();
  }

  renderHead(d) {
    const s = d.session;
    const st = sessionState(d);
    if (!this.headActions) {
      // Made once, so a reason being typed survives the live refreshes.
      const reason = h("input#hold-reason-input", { name: "reason", placeholder: "why (optional)", autocomplete: "off", "aria-label": "Hold reason" });
      this.holdForm = h(
        "form.hold-form#hold-form",
        {
          hidden: true,
          onsubmit: async (ev) => {
            ev.preventDefault();
            const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
            const r = await this.act(this.holdForm.querySelector("button[type=submit]"), "Hold", () => api("POST", this.base + "/hold", body));
            if (r) {
              reason.value = "";
              this.holdForm.hidden = true;
            }
          },
        },
        h("span.small.muted", "Hold the user queue: new user prompts wait until you resume. Nothing else waits."),
        h("div.form-row", reason, h("button.primary#hold-submit", { type: "submit" }, "Hold"), h("button", { type: "button", onclick: () => (this.holdForm.hidden = true) }, "Cancel")),
      );
      this.holdBtn = h(
        "button#hold-toggle",
        {
          onclick: () => {
            this.holdForm.hidden = !this.holdForm.hidden;
            if (!this.holdForm.hidden) reason.focus();
          },
        },
        "Hold queue…",
      );
      this.headMenu = h("span.head-menu");
      this.headActions = h("div.sh-actions", this.holdBtn, this.headMenu);
    }
    this.holdBtn.hidden = s.closed || !!d.hold;
    if (s.closed || d.hold) this.holdForm.hidden = true;
    // Rarely used and destructive: in the overflow menu, confirmed.
    replace(
      this.headMenu,
      s.closed
        ? null
        : menu("session", this.openMenus, [
            {
              label: "Close session…",
              cls: "close-session",
              danger: true,
              run: (e, btn) => {
                if (!confirm("Close this session? Every agent stops and its tasks end. This cannot be undone.")) return;
                this.act(btn, "Close session", () => api("POST", this.base + "/close", {}));
              },
            },
          ], "Session actions"),
    );
    if (this.headMenu.firstChild) this.headMenu.firstChild.querySelector(".close-session").id = "close-session";
    if (!this.headTitle) {
      this.headTitle = h("div.sh-title");
      this.headMeta = h("div.sh-meta");
      replace(this.el.head, h("div.sh-top", this.headTitle, this.headActions), this.holdForm, this.headMeta);
    }
    const perms = s.permissions || {};
    replace(this.headTitle, h("a.back", { href: "#/", title: "All sessions" }, "‹ Sessions"), h("h1", s.title || "(untitled)"));
    const needy = d.agents.filter((a) => a.why && a.why.needs_you);
    replace(
      this.headMeta,
      badge(st),
      needy.length ? h("span.badge.b-needs-you.needs-you#session-needs-you", { title: needy.map((a) => `${a.name}: ${a.why.text}`).join("\n") }, "needs you") : null,
      d.quiescent && !s.closed ? h("span.tag", "quiescent") : null,
      h("span.mono", s.id),
      h("span", "provider ", h("strong", s.provider || "default"), s.model ? [" · model ", h("strong", s.model)] : null),
      s.cwd ? h("span.mono", s.cwd) : null,
      h("span", "permissions: " + (perms.mode || "default")),
      h("span.muted", `${d.agents.length} agent${d.agents.length === 1 ? "" : "s"} · ${d.tasks.length} task${d.tasks.length === 1 ? "" : "s"} · ${d.notifications} notification${d.notifications === 1 ? "" : "s"} · ${d.messages} message${d.messages === 1 ? "" : "s"}`),
    );
  }

  renderBanners(d) {
    const out = [];
    if (d.session.closed) {
      out.push(h("div.banner.b-closed#closed-banner", h("strong", "Session closed"), d.session.close_reason ? " — " + d.session.close_reason : ""));
    }
    if (d.hold) {
      const held = d.status.reduce((n, s) => n + (s.held || 0), 0);
      out.push(
        h(
          "div.banner.b-hold#hold-banner",
          h(
            "div",
            h("strong", "User queue held"),
            ` by ${d.hold.by || "the user"} since ${clock(d.hold.since)}`,
            d.hold.reason ? h("span", " — “", h("span#hold-reason", d.hold.reason), "”") : " — no reason given",
            held ? `. ${held} prompt${held === 1 ? "" : "s"} waiting.` : ".",
            h("div.muted.small", "Only user prompts wait. Notifications, messages between agents and timers keep flowing."),
          ),
          d.session.closed ? null : h("button", { onclick: (e) => this.act(e.currentTarget, "Resume", () => api("POST", this.base + "/resume", {})) }, "Resume queue"),
        ),
      );
    }
    for (const p of d.approvals || []) {
      const a = d.agents.find((x) => x.id === p.agent);
      let input = "";
      try {
        const v = typeof p.input === "string" ? JSON.parse(p.input) : p.input;
        input = v && v.command ? "$ " + v.command : JSON.stringify(v);
      } catch {
        input = String(p.input || "");
      }
      const answer = (allow, always) => (e) =>
        this.act(e.currentTarget, always ? "Allow always" : allow ? "Allow" : "Deny", () => api("POST", `${this.base}/approvals/${enc(p.id)}`, always ? { allow, always } : { allow }));
      out.push(
        h(
          "div.banner.b-approval",
          { dataset: { approval: p.id } },
          h(
            "div.grow",
            h("strong", "Permission request " + p.id),
            ` — ${a ? a.name : p.agent} (run ${p.run}) wants to use `,
            h("strong", p.tool),
            p.reason ? h("span.muted", " · " + p.reason) : null,
            h("pre.inline-pre", input),
            time(p.deadline) ? h("div.muted.small", "denied automatically at " + clock(p.deadline)) : null,
            p.always_rule ? h("div.muted.small.grants", `Allow always adds ${p.always_rule}: ${p.grants || ""}`) : null,
          ),
          h(
            "div.btns",
            h("button.primary.approve", { onclick: answer(true, false) }, "Allow"),
            h(
              "button.approve-always" + (p.arbitrary ? ".danger" : ""),
              { onclick: answer(true, true), title: p.always_rule ? `Allow, and add the rule ${p.always_rule}: ${p.grants || ""}` : "Allow, and allow the same call from now on in this session" },
              "Allow always",
            ),
            h("button.danger.deny", { onclick: answer(false, false) }, "Deny"),
          ),
        ),
      );
    }
    const drops = Object.entries(d.drops || {});
    if (drops.length) {
      out.push(h("div.banner.b-drop", h("strong", "Dropped: "), drops.map(([k, v]) => `${k} × ${v}`).join(", ")));
    }
    replace(this.el.banners, out);
  }

  renderTree(d) {
    const kids = new Map();
    for (const a of d.agents) {
      const k = a.owner || "";
      if (!kids.has(k)) kids.set(k, []);
      kids.get(k).push(a);
    }
    const tasksByID = new Map(d.tasks.map((t) => [t.id, t]));
    const shellOf = (id) => d.tasks.filter((t) => t.kind === "shell" && t.owner === id);
    const node = (a) => {
      const task = a.task ? tasksByID.get(a.task) : null;
      const sel = a.id === (this.agentDetail && this.agentDetail.id);
      const running = a.run && (a.state === "running" || a.state === "waiting");
      // One action in sight (Stop, while the agent's task runs); the rest
      // in its overflow menu, the destructive one confirmed.
      const btns = [];
      if (task && liveTask(task)) btns.push(h("button.small.stop-task", { onclick: (e) => (e.stopPropagation(), this.stopTask(e.currentTarget, task)) }, "Stop"));
      btns.push(
        menu("agent:" + a.id, this.openMenus, [
          a.state !== "closed" ? { label: "Message…", cls: "message-agent", run: () => this.messageTo(a.id) } : null,
          running ? { label: "Cancel run", cls: "cancel-run", run: (e, btn) => this.act(btn, "Cancel run", () => api("POST", `${this.base}/agents/${enc(a.id)}/cancel`, {})) } : null,
          { label: "Show transcript", cls: "show-transcript", run: () => this.show(a.id) },
          a.owner && a.state !== "closed"
            ? {
                label: "Close agent…",
                cls: "close-agent",
                danger: true,
                run: (e, btn) => {
                  if (confirm(`Close agent ${a.name}? Its run and tasks end, and it cannot be resumed.`)) this.act(btn, "Close agent", () => api("POST", `${this.base}/agents/${enc(a.id)}/close`, {}));
                },
              }
            : null,
        ], `Actions for ${a.name}`),
      );
      // What the agent is doing or waiting on, from the server's one
      // answer; the ones that wait on a person stand out.
      const why = a.why && a.why.text ? a.why : null;
      const whyLine = why
        ? h(
            "div.node-why" + (why.needs_you ? ".needs" : ""),
            { dataset: { kind: why.kind || "", needsYou: why.needs_you ? "yes" : "no" } },
            why.needs_you ? h("span.badge.b-needs-you", "needs you") : null,
            h("span.why-text", why.text),
            time(why.since) && a.state !== "idle" ? since(why.since, " · ") : null,
            (why.holds_up || []).length ? h("span.muted", ` · holds up ${why.holds_up.join(", ")}`) : null,
          )
        : null;
      const tail = h("div.node-live.mono", { hidden: true });
      this.liveTails.set(a.id, tail);
      const meta = [];
      if (running) meta.push(h("span", `run ${a.run.seq} · `, since(a.run.started)));
      meta.push(h("span", `${a.runs} run${a.runs === 1 ? "" : "s"} done`));
      if (a.inbox.length) meta.push(h("span.warn-text", `${a.inbox.length} queued`));
      meta.push(h("span.muted", "active ", agoTick(a.last_active)));
      if (a.spent) {
        const u = a.spent.usage || {};
        const toks = (u.input_tokens || 0) + (u.output_tokens || 0) + (u.cache_read_tokens || 0) + (u.cache_write_tokens || 0);
        let spend = `${toks} tokens`;
        if (u.cache_read_tokens) spend += ` (${u.cache_read_tokens} cached)`;
        if (a.spent.rounds && !a.spent.unpriced_rounds) spend += ` · $${(a.spent.cost_micros / 1e6).toFixed(4)}`;
        if (a.compactions) spend += ` · ${a.compactions} compaction${a.compactions === 1 ? "" : "s"}`;
        meta.push(h("span.muted", spend));
      }
      if (a.blocked) meta.push(h("span.warn-text", a.blocked.kind === "budget" ? "budget spent" : "blocked"));
      if (task) meta.push(h("span.muted", `task ${task.id} `, badge(task.status)));
      const children = [...shellOf(a.id).map((t) => this.taskNode(t)), ...(kids.get(a.id) || []).map(node)];
      return h(
        "li.node",
        { dataset: { agent: a.name, agentId: a.id, state: a.state, needsYou: why && why.needs_you ? "yes" : "no" } },
        h(
          "div.node-row" + (sel ? ".selected" : ""),
          {
            role: "button",
            tabindex: 0,
            title: "Show " + a.name + "'s transcript",
            onclick: () => this.show(a.id),
            onkeydown: (e) => {
              if (e.key === "Enter") this.show(a.id);
            },
          },
          h("div.node-line", h("span.dot.s-" + a.state), h("strong.node-name", a.name), h("span.mono.muted", a.id), badge(a.state), h("span.grow"), h("span.btns", btns)),
          a.description ? h("div.node-desc", a.description) : null,
          whyLine,
          tail,
          h("div.node-meta", meta),
        ),
        children.length ? h("ul.tree", children) : null,
      );
    };
    this.liveTails.clear();
    replace(this.el.tree, h("ul.tree.root", (kids.get("") || []).map(node)));
  }

  taskNode(t) {
    const ended = time(t.ended);
    const btns = [h("button.small.view-output", { onclick: () => this.openOutput(t.id) }, "Output")];
    if (liveTask(t)) btns.push(h("button.small.stop-task", { onclick: (e) => this.stopTask(e.currentTarget, t) }, "Stop"));
    return h(
      "li.task",
      { dataset: { task: t.id, status: t.status } },
      h(
        "div.node-line",
        h("span.dot.s-" + t.status),
        h("strong", t.id),
        h("span.muted", "shell"),
        badge(t.status),
        t.exit_code !== undefined && t.exit_code !== null ? h("span.muted", "exit " + t.exit_code) : null,
        h("span.grow"),
        h("span.btns", btns),
      ),
      h("div.node-cmd.mono", "$ " + (t.command || "")),
      h(
        "div.node-meta",
        t.description ? h("span", t.description) : null,
        ended !== null ? h("span.muted", "ran " + dur(ended - time(t.started))) : h("span", "running ", since(t.started)),
      ),
    );
  }

  stopTask(btn, t) {
    return this.act(btn, "Stop " + t.id, async () => {
      const r = await api("POST", `${this.base}/tasks/${enc(t.id)}/stop`, {});
      toast(`Stop requested: task ${t.id} is ${r.status}.`);
      return r;
    });
  }

  show(agentID) {
    const a = this.detail && this.detail.agents.find((x) => x.id === agentID);
    location.hash = "#/s/" + enc(this.id) + (a && a.id !== "a0" ? "/" + enc(a.id) : "");
    if (window.matchMedia("(max-width: 900px)").matches) $("#transcript-card").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  renderTranscript() {
    const a = this.agentDetail;
    if (!a) return;
    const running = a.run && (a.state === "running" || a.state === "waiting");
    replace(
      this.el.transcriptHead,
      h("h2", "Transcript · ", h("span#transcript-agent", a.name), " ", h("span.mono.muted", a.id)),
      badge(a.state),
      h("span.grow"),
      a.id !== "a0" ? h("button.small", { onclick: () => this.show("a0") }, "Back to main") : null,
      running ? h("button.small", { onclick: (e) => this.act(e.currentTarget, "Cancel run", () => api("POST", `${this.base}/agents/${enc(a.id)}/cancel`, {})) }, "Cancel run") : null,
    );
    const t = a.transcript || [];
    const last = t.length ? JSON.stringify(t[t.length - 1]).length : 0;
    const key = `${a.id}:${t.length}:${last}:${this.times.key}`;
    if (key !== this.transcriptKey) {
      const atBottom = this.el.transcript.scrollHeight - this.el.transcript.scrollTop - this.el.transcript.clientHeight < 40;
      this.transcriptKey = key;
      if (!this.folds.has(a.id)) this.folds.set(a.id, new Set());
      const times = this.times.key.startsWith(a.id + ":") ? this.times.times : [];
      const entries = renderTranscript(t, a.name, { times, open: this.folds.get(a.id) });
      replace(this.el.transcript, entries.length ? entries : h("p.muted.empty", "Nothing yet."));
      if (atBottom || this.el.transcript.dataset.fresh !== "no") this.el.transcript.scrollTop = this.el.transcript.scrollHeight;
      this.el.transcript.dataset.fresh = "no";
    }
    // What the agent is doing now, below the transcript.
    let now = null;
    if (running) {
      const r = a.run;
      let what = "working";
      if (a.state === "waiting") what = "waiting for a permission answer";
      else if (r.call && r.call.state === "in-flight") what = `model call ${r.call.id} in flight`;
      else if (r.call && r.call.state === "backoff") what = `model call backs off (${r.call.retry_reason || "retry"})`;
      else if (r.call && r.call.state === "waiting-slot") what = "waiting for a model-call slot";
      else if ((r.tools || []).some((x) => !x.done)) what = "running tool calls: " + r.tools.filter((x) => !x.done).map((x) => x.name).join(", ");
      if (a.why && a.why.text) what = a.why.text;
      now = h("div.now", h("span.spinner"), `run ${r.seq} (${r.kind}) · round ${r.round} · ${what} · `, since(r.started));
    }
    replace(this.el.activity, now);
  }

  renderInbox(d) {
    const withItems = d.agents.filter((a) => a.inbox.length > 0);
    if (withItems.length === 0) {
      replace(this.el.inbox, h("p.muted.empty", "Every inbox is empty."));
      return;
    }
    const statusOf = new Map(d.status.map((s) => [s.agent, s]));
    replace(
      this.el.inbox,
      withItems.map((a) => {
        const st = statusOf.get(a.id);
        return h(
          "div.inbox",
          { dataset: { agent: a.name } },
          h("div.inbox-head", h("strong", a.name), h("span.mono.muted", a.id), h("span", `${a.inbox.length} item${a.inbox.length === 1 ? "" : "s"}`)),
          st
            ? h(
                "div.why" + (st.draining ? ".draining" : ".blocked"),
                h("strong", st.draining ? "Draining: " : "Not draining: "),
                h("span.reason", localTimes(st.reason)),
                st.clears_on ? h("span.muted", " · clears on " + st.clears_on) : null,
                time(st.until) ? h("span.muted", " · until " + clock(st.until)) : null,
              )
            : null,
          h(
            "ul.items",
            a.inbox.map((it, i) => {
              const held = d.hold && it.kind === "prompt";
              const btns = [];
              if (it.kind === "prompt") {
                if (i > 0) btns.push(h("button.small", { title: "Move up", "aria-label": "Move up", onclick: (e) => this.move(e.currentTarget, it, i - 1) }, "↑"));
                if (i < a.inbox.length - 1) btns.push(h("button.small", { title: "Move down", "aria-label": "Move down", onclick: (e) => this.move(e.currentTarget, it, i + 1) }, "↓"));
              }
              if (it.kind === "prompt" || it.kind === "continuation")
                btns.push(h("button.small.danger", { onclick: (e) => this.act(e.currentTarget, "Cancel " + it.id, () => api("DELETE", `${this.base}/inbox/${enc(it.id)}`)) }, "Cancel"));
              return h(
                "li.item",
                { dataset: { item: it.id, kind: it.kind } },
                h(
                  "div.node-line",
                  h("span.mono.muted", it.id),
                  badge(it.kind, "kind"),
                  badge(it.priority, "prio-" + it.priority),
                  held ? badge("held") : null,
                  it.note ? h("span.mono", String(it.note)) : null,
                  it.from ? h("span.muted", "from " + (this.names.get(it.from) || it.from)) : null,
                  time(it.enqueued) ? h("span.muted.small", { title: "queued at " + new Date(time(it.enqueued)).toLocaleString() }, clock(it.enqueued)) : null,
                  h("span.grow"),
                  h("span.btns", btns),
                ),
                // What the item is: a prompt's or message's text, a
                // notification's summary; one line, the rest on hover.
                it.text ? h("div.item-text", { title: it.text.length > 240 ? it.text : null }, cut(it.text.replace(/\s*\n\s*/g, " ⏎ "), 240)) : null,
              );
            }),
          ),
        );
      }),
    );
  }

  move(btn, it, index) {
    return this.act(btn, "Move " + it.id, () => api("POST", `${this.base}/inbox/${enc(it.id)}/move`, { index }));
  }

  renderMessages(d) {
    if (!this.msgs.length) {
      replace(this.el.messages, h("p.muted.empty", "No messages yet."));
      return;
    }
    const n = (id) => this.names.get(id) || id;
    replace(
      this.el.messages,
      h(
        "ul.msgs",
        [...this.msgs].reverse().map((m) =>
          h(
            "li.msg",
            { dataset: { msg: m.id, outcome: m.outcome } },
            h("div.node-line", h("span.mono.muted", m.id), h("span", `${n(m.from)} → ${n(m.to)}`), badge(m.outcome), h("span.grow"), h("span.muted.small", clock(m.sent))),
            h("div.item-text", cut(m.text, 200)),
            h("div.muted.small", outcomeDetail(m, d.agents)),
          ),
        ),
      ),
    );
    // A message whose outcome was pending when sent: show it once known.
    if (this.pendingMsg) {
      const m = this.msgs.find((x) => x.id === this.pendingMsg);
      if (m && m.outcome !== "pending") {
        this.pendingMsg = null;
        this.showOutcome(m);
      }
    }
  }

  renderRuns() {
    const byAgent = new Map();
    for (const r of this.runs) {
      if (!byAgent.has(r.agent)) byAgent.set(r.agent, []);
      byAgent.get(r.agent).push(r);
    }
    if (!this.runs.length) {
      replace(this.el.runs, h("p.muted.empty", "No runs yet."));
      return;
    }
    replace(
      this.el.runs,
      [...byAgent.entries()].map(([agent, runs]) =>
        h(
          "div.run-group",
          h("div.run-agent", h("strong", runs[0].agent_name), h("span.mono.muted", agent)),
          h(
            "ul.runs",
            runs.map((r) => {
              const ended = time(r.ended);
              const reply = r.error ? r.error : r.reply || "";
              return h(
                "li.run",
                { dataset: { agent: r.agent_name, seq: String(r.seq), status: r.status } },
                h(
                  "div.node-line",
                  h("span.mono", "#" + r.seq),
                  h("span.muted", r.kind),
                  badge(r.status),
                  r.status === "running" ? since(r.started) : h("span.muted", ended ? dur(ended - time(r.started)) : ""),
                  h("span.muted.small", clock(r.started)),
                  (r.answered || []).length ? h("span.muted.small", "answers " + r.answered.join(", ")) : null,
                ),
                reply ? h("div.run-reply" + (r.error ? ".err" : ""), cut(reply, 300)) : null,
              );
            }),
          ),
        ),
      ),
    );
  }

  // ---- forms

  promptForm() {
    const text = h("textarea#prompt-text", { name: "text", rows: 2, placeholder: "Send the main agent a prompt…", required: true });
    const prio = select("priority", priorities, "next");
    this.promptResult = h("div.result#prompt-result", { "aria-live": "polite" });
    const form = h(
      "form.stack#prompt-form",
      {
        onsubmit: async (ev) => {
          ev.preventDefault();
          const body = { text: text.value, priority: prio.value };
          const r = await this.act(form.querySelector("button"), "Send prompt", () => api("POST", this.base + "/prompts", body));
          if (r) {
            text.value = "";
            replace(this.promptResult, "Queued as ", h("span.mono", r.item), this.detail && this.detail.hold ? " — the queue is held: it waits until you resume." : ".");
          }
        },
      },
      text,
      h("div.form-row", prio, h("button.primary", { type: "submit" }, "Send prompt")),
      this.promptResult,
    );
    this.promptCard = h("section.card.o3#prompt-card", h("div.card-head", h("h2", "Prompt")), form);
    return this.promptCard;
  }

  messageForm() {
    this.msgTo = h("select#message-to", { name: "to", "aria-label": "Agent" });
    const text = h("textarea#message-text", { name: "text", rows: 2, placeholder: "Message text…", required: true });
    this.msgText = text;
    const prio = select("priority", priorities, "next");
    this.msgResult = h("div.result#message-result", { "aria-live": "polite" });
    const form = h(
      "form.stack#message-form",
      {
        onsubmit: async (ev) => {
          ev.preventDefault();
          const to = this.msgTo.value;
          replace(this.msgResult, h("span.muted", "Sending…"));
          const btn = form.querySelector("button");
          await busy(btn, async () => {
            try {
              const r = await api("POST", `${this.base}/agents/${enc(to)}/messages`, { text: text.value, priority: prio.value }, { withStatus: true });
              text.value = "";
              const m = r.data;
              if (m.outcome === "pending") this.pendingMsg = m.id;
              this.showOutcome(m);
              this.refresh();
            } catch (e) {
              if (!(e instanceof ApiError && e.status === 401)) replace(this.msgResult, badge("error"), " ", h("span", "Not sent: " + errText(e)));
            }
          });
        },
      },
      h("div.form-row", h("span.label", "To"), this.msgTo),
      text,
      h("div.form-row", prio, h("button.primary", { type: "submit" }, "Send message")),
      this.msgResult,
    );
    return h("section.card.o4#message-card", h("div.card-head", h("h2", "Message an agent")), form);
  }

  showOutcome(m) {
    const agents = (this.detail && this.detail.agents) || [];
    replace(
      this.msgResult,
      h("div.outcome", { dataset: { outcome: m.outcome, msg: m.id } }, h("div", "Message ", h("span.mono", m.id), " → ", this.names.get(m.to) || m.to, ": ", badge(m.outcome)), h("div.outcome-detail", outcomeDetail(m, agents))),
    );
  }

  messageTo(agentID) {
    this.msgTo.value = agentID;
    this.msgText.focus();
    this.msgText.scrollIntoView({ behavior: "smooth", block: "center" });
  }

  updateForms(d) {
    const closed = d.session.closed;
    const cur = this.msgTo.value;
    const open = d.agents.filter((a) => a.state !== "closed");
    const key = open.map((a) => a.id + a.name).join(",");
    if (this.msgTo.dataset.key !== key) {
      replace(
        this.msgTo,
        open.map((a) => h("option", { value: a.id }, `${a.name} (${a.id}) — ${a.state}`)),
      );
      this.msgTo.dataset.key = key;
      if (open.some((a) => a.id === cur)) this.msgTo.value = cur;
    } else {
      for (const o of this.msgTo.options) {
        const a = open.find((x) => x.id === o.value);
        if (a) o.textContent = `${a.name} (${a.id}) — ${a.state}`;
      }
    }
    for (const f of [$("#prompt-form"), $("#message-form")]) {
      if (f) for (const el of f.elements) el.disabled = closed;
    }
  }

  // ---- task output

  openOutput(taskID) {
    if (this.output) this.output.close();
    this.output = new OutputDialog(this, taskID);
    this.output.open();
  }
}

/** OutputDialog shows a shell task's output, following it while it runs. */
class OutputDialog {
  constructor(view, taskID) {
    this.view = view;
    this.task = taskID;
    this.offset = 0;
    this.status = "";
    this.loading = false;
    this.dlg = $("#output-dialog");
  }

  open() {
    this.pre = h("pre.output#output-text", "");
    this.statusEl = h("span");
    this.cmd = h("div.mono.muted.small");
    replace(
      this.dlg,
      h("div.dlg-head", h("h2", "Output of ", h("span.mono", this.task), " "), this.statusEl, h("span.grow"), h("button.small#output-close", { onclick: () => this.close() }, "Close")),
      this.cmd,
      this.pre,
    );
    this.dlg.onclose = () => {
      clearInterval(this.timer);
      if (this.view.output === this) this.view.output = null;
    };
    if (!this.dlg.open) this.dlg.showModal();
    this.refresh(this.view.detail);
    // Output makes no events: follow it while the task runs.
    this.timer = setInterval(() => {
      if (this.status === "running" || this.status === "stopping") this.refresh(this.view.detail);
    }, 1000);
  }

  close() {
    clearInterval(this.timer);
    if (this.dlg.open) this.dlg.close();
    if (this.view.output === this) this.view.output = null;
  }

  async refresh(d) {
    const t = d && d.tasks.find((x) => x.id === this.task);
    if (t) this.cmd.textContent = "$ " + (t.command || "");
    if (this.loading) return;
    this.loading = true;
    try {
      for (let i = 0; i < 20; i++) {
        const r = await api("GET", `${this.view.base}/tasks/${enc(this.task)}/output?offset=${this.offset}&limit=65536`);
        this.status = r.status;
        replace(this.statusEl, badge(r.status || "unknown"));
        if (r.data) {
          const follow = this.pre.scrollHeight - this.pre.scrollTop - this.pre.clientHeight < 30;
          this.pre.append(r.data);
          if (follow) this.pre.scrollTop = this.pre.scrollHeight;
        }
        const more = r.next > this.offset && r.data.length > 0;
        this.offset = r.next;
        if (!more) break;
      }
      if (!this.pre.textContent) this.pre.textContent = "";
      this.pre.dataset.empty = this.pre.textContent ? "no" : "yes";
    } catch (e) {
      replace(this.statusEl, badge("error"), " " + errText(e));
    } finally {
      this.loading = false;
    }
  }
}

// ---------------------------------------------------------------- start

initToken();
route();
