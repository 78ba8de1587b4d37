// A small, safe Markdown renderer for model text. It builds DOM nodes
// and puts every piece of the source in the page as text, never as HTML:
// a "<script>" in a reply shows as those characters. It knows code fences,
// inline code, bold, italic, strike-through, headings, bullet and
// numbered lists (nested by indent), block quotes, rules and links; a
// link's target must be an http or https URL, anything else stays text.

import { h } from "./dom.js";

/** markdown renders text as a div.md of block elements. */
export function markdown(text) {
  const lines = String(text || "")
    .replace(/\r\n?/g, "\n")
    .split("\n");
  return h("div.md", blocks(lines, 0));
}

const fenceRe = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const headingRe = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const ruleRe = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const quoteRe = /^ {0,3}>\s?/;
const itemRe = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;

// blocks renders lines as block elements; depth bounds nesting, so that a
// hostile text cannot recurse without end.
function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") {
      i++;
      continue;
    }
    let m = line.match(fenceRe);
    if (m) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const c = lines[i].trim();
        if (c.startsWith(fence[0].repeat(fence.length)) && /^(`+|~+)$/.test(c)) break;
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or the end)
      out.push(h("pre.md-code", { dataset: m[2] ? { lang: m[2] } : {} }, h("code", body.join("\n"))));
      continue;
    }
    m = line.match(headingRe);
    if (m) {
      const level = Math.min(6, m[1].length + 2); // # is h3: a reply's title is not the page's
      out.push(h("h" + level + ".md-h", inline(m[2], 0)));
      i++;
      continue;
    }
    if (ruleRe.test(line)) {
      out.push(h("hr.md-hr"));
      i++;
      continue;
    }
    if (quoteRe.test(line) && depth < 8) {
      const body = [];
      while (i < lines.length && lines[i].trim() !== "" && quoteRe.test(lines[i])) {
        body.push(lines[i].replace(quoteRe, ""));
        i++;
      }
      out.push(h("blockquote.md-quote", blocks(body, depth + 1)));
      continue;
    }
    m = line.match(itemRe);
    if (m && depth < 8) {
      const [list, next] = listAt(lines, i, depth);
      out.push(list);
      i = next;
      continue;
    }
    // A paragraph: lines up to a blank line or another block, with its
    // line breaks kept.
    const para = [];
    while (i < lines.length) {
      const l = lines[i];
      if (l.trim() === "" || fenceRe.test(l) || headingRe.test(l) || quoteRe.test(l) || (para.length > 0 && itemRe.test(l))) break;
      para.push(l.trim());
      i++;
    }
    if (para.length === 0) {
      // A line no block takes (a list too deeply nested): as text.
      para.push(lines[i].trim());
      i++;
    }
    const kids = [];
    para.forEach((l, k) => {
      if (k > 0) kids.push(h("br"));
      kids.push(inline(l, 0));
    });
    out.push(h("p.md-p", kids));
  }
  return out;
}

// listAt reads the list that starts at lines[start]: its items, each
// with the lines indented under it, which may hold a nested list.
function listAt(lines, start, depth) {
  const first = lines[start].match(itemRe);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const attrs = {};
  if (ordered) {
    const n = parseInt(first[2], 10);
    if (n !== 1) attrs.start = String(n);
  }
  const items = [];
  let i = start;
  let cur = null;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") {
      // A blank line ends the list unless an indented line follows.
      const nx = lines[i + 1];
      if (nx !== undefined && cur && nx.match(/^(\s*)/)[1].length > indent && nx.trim() !== "") {
        cur.push("");
        i++;
        continue;
      }
      break;
    }
    const m = line.match(itemRe);
    const lead = line.match(/^(\s*)/)[1].length;
    if (m && lead === indent && /\d/.test(m[2]) === ordered) {
      cur = [m[3]];
      items.push(cur);
      i++;
      continue;
    }
    if (m && lead <= indent) break; // another kind of list
    if (!m && lead <= indent && !cur) break;
    if (lead > indent || (cur && !m)) {
      // Under the current item: a continuation or a nested list.
      cur.push(lead > indent ? line.slice(Math.min(lead, indent + 2)) : line.trim());
      i++;
      continue;
    }
    break;
  }
  const tag = ordered ? "ol.md-list" : "ul.md-list";
  const list = h(
    tag,
    attrs,
    items.map((it) => {
      // One plain line stays inline; more become blocks.
      if (it.length === 1) return h("li", inline(it[0], 0));
      return h("li", blocks(it, depth + 1));
    }),
  );
  return [list, i];
}

/** safeURL returns an http(s) URL's canonical form, or "" for any other. */
export function safeURL(s) {
  let u;
  try {
    u = new URL(String(s).trim());
  } catch {
    return "";
  }
  return u.protocol === "http:" || u.protocol === "https:" ? u.href : "";
}

function link(href, kids) {
  return h("a.md-link", { href, target: "_blank", rel: "noopener noreferrer nofollow" }, kids);
}

const punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

// inline renders one line's spans. depth bounds the nesting of emphasis.
function inline(s, depth) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push(buf);
    buf = "";
  };
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === "\\" && i + 1 < s.length && punct.includes(s[i + 1])) {
      buf += s[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      let n = 1;
      while (s[i + n] === "`") n++;
      const tick = "`".repeat(n);
      const end = s.indexOf(tick, i + n);
      if (end >= 0) {
        flush();
        let code = s.slice(i + n, end);
        if (/^ .* $/.test(code)) code = code.slice(1, -1);
        out.push(h("code.md-code-inline", code));
        i = end + n;
        continue;
      }
      buf += tick;
      i += n;
      continue;
    }
    if (c === "[") {
      const m = s.slice(i).match(/^\[([^\]]*)\]\(\s*<?([^\s)>]*)>?(?:\s+"[^"]*")?\s*\)/);
      if (m) {
        const href = safeURL(m[2]);
        flush();
        if (href && depth < 4) out.push(link(href, inline(m[1], depth + 1)));
        else out.push(m[0]); // not a web link: the source, as text
        i += m[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && /^https?:\/\//i.test(s.slice(i, i + 8)) && (i === 0 || !/[\w/]/.test(s[i - 1]))) {
      let m = s.slice(i).match(/^https?:\/\/[^\s<>"'`]+/i)[0];
      // Trailing punctuation ends the sentence, not the URL.
      const count = (ch) => m.split(ch).length - 1;
      while (/[.,;:!?*_\]]$/.test(m) || (m.endsWith(")") && count("(") < count(")"))) m = m.slice(0, -1);
      const href = safeURL(m);
      if (href) {
        flush();
        out.push(link(href, m));
        i += m.length;
        continue;
      }
    }
    if ((c === "*" || c === "_" || c === "~") && depth < 4) {
      const two = s[i + 1] === c;
      if (c === "~" && !two) {
        buf += c;
        i++;
        continue;
      }
      const mark = two ? c + c : c;
      const open = i + mark.length;
      // An opener is followed by a non-space; "_" opens only at a word's
      // start, so snake_case stays as it is.
      const canOpen = open < s.length && !/\s/.test(s[open]) && !(c === "_" && i > 0 && /\w/.test(s[i - 1]));
      if (canOpen) {
        let end = s.indexOf(mark, open + 1);
        while (end >= 0) {
          const okClose = !/\s/.test(s[end - 1]) && !(c === "_" && end + mark.length < s.length && /\w/.test(s[end + mark.length])) && !(!two && s[end + 1] === c);
          if (okClose) break;
          end = s.indexOf(mark, end + 1);
        }
        // A closer inside a longer run ("***") is the run's last two:
        // "**a *b***" is a strong holding an emphasis.
        while (two && end >= 0 && s[end + 2] === c) end++;
        if (end >= 0) {
          flush();
          const kids = inline(s.slice(open, end), depth + 1);
          out.push(c === "~" ? h("del", kids) : two ? h("strong", kids) : h("em", kids));
          i = end + mark.length;
          continue;
        }
      }
      buf += mark;
      i += mark.length;
      continue;
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}
