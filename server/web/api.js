// The API client: the bearer token, JSON calls and the event streams.
//
// The token comes from the URL fragment (#token=...) on first load, as
// `vigil serve` prints it, and is kept in localStorage; it is removed from
// the address bar at once. Every request sends it as a bearer token, event
// streams included: EventSource cannot send headers, so streams are read
// with fetch() and parsed here.

const TOKEN_KEY = "vigil.token";

let token = "";
const unauthorizedHandlers = [];

/** Reads the token from the fragment or from localStorage. */
export function initToken() {
  if (!tokenFromHash()) {
    try {
      token = localStorage.getItem(TOKEN_KEY) || "";
    } catch {
      token = "";
    }
  }
  return token;
}

/**
 * tokenFromHash takes a token given in the fragment (#token=...), keeps it
 * and removes it from the address bar and the history. It reports whether
 * there was one.
 */
export function tokenFromHash() {
  const frag = location.hash.startsWith("#") ? location.hash.slice(1) : "";
  if (!/(^|&)token=/.test(frag)) return false;
  const params = new URLSearchParams(frag);
  const t = params.get("token");
  params.delete("token");
  const rest = params.toString();
  history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : "#/"));
  if (!t) return false;
  setToken(t);
  return true;
}

export function hasToken() {
  return token !== "";
}

export function setToken(t) {
  token = (t || "").trim();
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Private mode: the token lives for this page only.
  }
}

export function forgetToken() {
  setToken("");
}

/** Registers fn, called when the server refuses the token. */
export function onUnauthorized(fn) {
  unauthorizedHandlers.push(fn);
}

function unauthorized() {
  forgetToken();
  for (const fn of unauthorizedHandlers) fn();
}

/** ApiError is a JSON error from the server: {error:{code,message}}. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || "HTTP " + status);
    this.status = status;
    this.code = code || "";
  }
}

/**
 * Calls the API and returns the decoded JSON body (null for 204), with the
 * HTTP status on the result as result.__status when asked.
 */
export async function api(method, path, body, opts = {}) {
  const headers = { Authorization: "Bearer " + token, Accept: "application/json" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, "network", "cannot reach the server: " + e.message);
  }
  if (res.status === 401) {
    unauthorized();
    throw new ApiError(401, "unauthorized", "the server refused the token");
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError(res.status, "bad_response", "the server answered something that is not JSON");
    }
  }
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(res.status, err.code, err.message || res.statusText);
  }
  if (opts.withStatus) return { status: res.status, data };
  return data;
}

/** apiText GETs path and returns its body as text (for JSONL exports). */
export async function apiText(path) {
  let res;
  try {
    res = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "network", "cannot reach the server: " + e.message);
  }
  if (res.status === 401) {
    unauthorized();
    throw new ApiError(401, "unauthorized", "the server refused the token");
  }
  const text = await res.text();
  if (!res.ok) {
    let err = {};
    try {
      err = (JSON.parse(text) || {}).error || {};
    } catch {
      err = {};
    }
    throw new ApiError(res.status, err.code, err.message || res.statusText);
  }
  return text;
}

/**
 * EventStream reads a Server-Sent Events stream with fetch(), so that it can
 * send the bearer token, and reconnects after a dropped connection with
 * Last-Event-ID: the server replays what was missed from its store, in
 * order, none twice. Without `after` the stream starts at the server's
 * current end (only new events); `after: 0` replays from the beginning.
 * The server's first frame carries the id the stream starts after, so a
 * reconnect resumes there even before any event came. A vigil.cut event
 * (the client fell behind, or the server is shutting down) ends the
 * stream with the id to resume from; the stream reconnects at once.
 * Between other attempts it waits with exponential backoff (1s, 2s, 4s ...
 * 30s, with jitter) and reports its state: "connecting", "live",
 * "reconnecting" (with the delay) or "stopped".
 */
export class EventStream {
  constructor(url, { after = null, onEvent, onState }) {
    this.url = url;
    this.lastId = after;
    this.onEvent = onEvent;
    this.onState = onState || (() => {});
    this.stopped = false;
    this.ctrl = null;
    this.wake = null;
    this.attempt = 0;
    this.connects = 0;
    this.state = "";
    this.cut = null;
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.stopped = true;
    if (this.ctrl) this.ctrl.abort();
    if (this.wake) this.wake();
    this.setState("stopped");
  }

  /** Reconnects now instead of waiting out the backoff. */
  retryNow() {
    if (this.wake) this.wake();
  }

  setState(state, info = {}) {
    if (this.stopped && state !== "stopped") return;
    this.state = state;
    this.onState(state, info);
  }

  async run() {
    while (!this.stopped) {
      this.setState(this.connects === 0 ? "connecting" : "reconnecting", { attempt: this.attempt, connecting: true });
      const started = Date.now();
      let gotEvent = false;
      let failure = "";
      this.cut = null;
      try {
        gotEvent = await this.connect();
        failure = "the stream ended";
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof ApiError && e.status === 401) return; // the token form takes over
        failure = e.message || String(e);
      }
      if (this.stopped) return;
      // A connection that delivered events or lasted a while resets the
      // backoff; one refused at once doubles it.
      if (gotEvent || Date.now() - started > 5000) this.attempt = 0;
      const base = Math.min(30000, 1000 * 2 ** this.attempt);
      let delay = Math.round(base * (0.8 + Math.random() * 0.4));
      if (this.cut) {
        // Cut short on purpose: resume now (a shutting-down server
        // refuses the reconnect, and the backoff goes on from there).
        failure = "cut: " + (this.cut.message || this.cut.reason || "the server ended the stream");
        delay = Math.round(100 + Math.random() * 200);
        this.attempt = 0;
      }
      this.attempt++;
      this.setState("reconnecting", { delay, until: Date.now() + delay, reason: failure, attempt: this.attempt });
      await new Promise((resolve) => {
        const t = setTimeout(resolve, delay);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
  }

  // connect reads one connection until it ends; it returns whether any
  // event came.
  async connect() {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    const headers = { Authorization: "Bearer " + token, Accept: "text/event-stream" };
    if (this.lastId !== null && this.lastId !== undefined) headers["Last-Event-ID"] = String(this.lastId);
    const res = await fetch(this.url, { headers, signal: ctrl.signal, cache: "no-store" });
    if (res.status === 401) {
      unauthorized();
      throw new ApiError(401, "unauthorized", "the server refused the token");
    }
    if (!res.ok || !res.body) {
      throw new Error("HTTP " + res.status);
    }
    this.connects++;
    this.setState("live", { connects: this.connects });
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    let frame = { id: null, event: "message", data: [] };
    let got = false;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        // Lines end with \n, \r\n or \r.
        while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
          if (buf[nl] === "\r" && nl === buf.length - 1) break; // maybe half of \r\n
          const line = buf.slice(0, nl);
          buf = buf.slice(buf[nl] === "\r" && buf[nl + 1] === "\n" ? nl + 2 : nl + 1);
          if (line === "") {
            if (frame.data.length > 0) {
              if (this.dispatch(frame)) got = true;
            } else if (frame.id !== null) {
              // An event-less frame still sets the last event id (as in
              // EventSource): where the stream starts.
              const id = Number(frame.id);
              if (frame.id !== "" && Number.isFinite(id) && (this.lastId === null || this.lastId === undefined || id > this.lastId)) this.lastId = id;
            }
            frame = { id: null, event: "message", data: [] };
            continue;
          }
          if (line.startsWith(":")) continue; // comment or heartbeat
          const i = line.indexOf(":");
          const field = i < 0 ? line : line.slice(0, i);
          let val = i < 0 ? "" : line.slice(i + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (field === "data") frame.data.push(val);
          else if (field === "id") frame.id = val;
          else if (field === "event") frame.event = val;
          // "retry" is ignored: the backoff above decides.
        }
      }
    } finally {
      ctrl.abort();
    }
    return got;
  }

  dispatch(frame) {
    if (frame.event === "vigil.cut") {
      let cut = {};
      try {
        cut = JSON.parse(frame.data.join("\n")) || {};
      } catch {
        cut = {};
      }
      const after = Number(cut.resume_after);
      if (Number.isFinite(after) && (this.lastId === null || this.lastId === undefined || after > this.lastId)) this.lastId = after;
      this.cut = cut;
      return false;
    }
    let id = frame.id === null ? null : Number(frame.id);
    if (id !== null && !Number.isFinite(id)) id = null;
    if (id !== null && this.lastId !== null && this.lastId !== undefined && id <= this.lastId) {
      return false; // seen already (the server never sends it twice; this is a guard)
    }
    let ev;
    try {
      ev = JSON.parse(frame.data.join("\n"));
    } catch {
      ev = { type: frame.event, data: null };
    }
    if (id !== null) this.lastId = id;
    this.onEvent(ev, id);
    return true;
  }
}
