package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestUIMarkdown runs the web UI's Markdown renderer (web/markdown.js) and
// its fold in Chromium, on the page the server serves, and compares the
// HTML it builds. Text that looks like HTML stays text, links go only to
// http(s) URLs, and a hostile corpus yields no element or attribute
// outside the renderer's small set.
func TestUIMarkdown(t *testing.T) {
	chromium := findChromium(t)
	h := newHarness(t)
	b := startBrowser(t, chromium, artifactsDir(t), 60*time.Second)
	b.do(chromedp.Navigate(h.ts.URL + "/"))
	b.eval(`(window.__mods = null, Promise.all([import("/ui/markdown.js"), import("/ui/transcript.js")]).then(([md, tr]) => (window.__mods = {md, tr})), "")`)
	b.poll("the renderer's modules", `!!window.__mods`)
	render := func(src string) string {
		t.Helper()
		return b.eval(`window.__mods.md.markdown(` + js(src) + `).innerHTML`)
	}

	cases := []struct{ name, src, want string }{
		{"html is text", `<script>alert(1)</script> & <img src=x onerror=alert(1)>`,
			`<p class="md-p">&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt;</p>`},
		{"inline", "**bold**, *it*, _it too_, ~~gone~~ and `a<b>` in snake_case_name",
			`<p class="md-p"><strong>bold</strong>, <em>it</em>, <em>it too</em>, <del>gone</del> and <code class="md-code-inline">a&lt;b&gt;</code> in snake_case_name</p>`},
		{"nested emphasis", "**bold *and it***",
			`<p class="md-p"><strong>bold <em>and it</em></strong></p>`},
		{"web link", `[the docs](https://example.com/a?b=1&c=2)`,
			`<p class="md-p"><a class="md-link" href="https://example.com/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer nofollow">the docs</a></p>`},
		{"script link stays text", `[click](javascript:alert(1)) [x](data:text/html,hi) [y](//evil.example/)`,
			`<p class="md-p">[click](javascript:alert(1)) [x](data:text/html,hi) [y](//evil.example/)</p>`},
		{"bare url", "see https://example.com/x_y. and (http://example.org/p)",
			`<p class="md-p">see <a class="md-link" href="https://example.com/x_y" target="_blank" rel="noopener noreferrer nofollow">https://example.com/x_y</a>. and (<a class="md-link" href="http://example.org/p" target="_blank" rel="noopener noreferrer nofollow">http://example.org/p</a>)</p>`},
		{"code fence", "```go\nfmt.Println(\"<b>\")\n  **not bold**\n```\nafter",
			`<pre class="md-code" data-lang="go"><code>fmt.Println("&lt;b&gt;")` + "\n" + `  **not bold**</code></pre><p class="md-p">after</p>`},
		{"unclosed fence", "```\nx\ny",
			`<pre class="md-code"><code>x` + "\n" + `y</code></pre>`},
		{"headings", "# Title\n### Sub *it*",
			`<h3 class="md-h">Title</h3><h5 class="md-h">Sub <em>it</em></h5>`},
		{"lists", "- one\n- two\n  - two.a\n- three\n\n3. c\n4. d",
			`<ul class="md-list"><li>one</li><li><p class="md-p">two</p><ul class="md-list"><li>two.a</li></ul></li><li>three</li></ul><ol class="md-list" start="3"><li>c</li><li>d</li></ol>`},
		{"paragraphs keep line breaks", "line one\nline two\n\nnext",
			`<p class="md-p">line one<br>line two</p><p class="md-p">next</p>`},
		{"quote and rule", "> quoted **b**\n\n---",
			`<blockquote class="md-quote"><p class="md-p">quoted <strong>b</strong></p></blockquote><hr class="md-hr">`},
		{"escapes", `\*not it\* and \[no](https://x.example/)`,
			`<p class="md-p">*not it* and [no](<a class="md-link" href="https://x.example/" target="_blank" rel="noopener noreferrer nofollow">https://x.example/</a>)</p>`},
	}
	for _, c := range cases {
		if got := render(c.src); got != c.want {
			t.Errorf("%s: markdown(%q)\n got %s\nwant %s", c.name, c.src, got, c.want)
		}
	}

	// A hostile corpus: every element is one the renderer makes, no
	// attribute runs script, every link is http(s).
	hostile := []string{
		`<a href="javascript:alert(1)">x</a>`, `[x](javascript:alert(1))`, `[x](JaVaScRiPt:alert(1))`,
		"[x](https://ok.example/\" onclick=\"alert(1))", `<svg onload=alert(1)>`, "```\n</code></pre><script>alert(1)</script>\n```",
		"`<iframe src=//evil>`", `**<b onmouseover=alert(1)>**`, `[<img src=x onerror=alert(1)>](https://ok.example/)`,
		strings.Repeat("*", 500) + "x" + strings.Repeat("_", 500), strings.Repeat("> ", 200) + "deep", strings.Repeat("  - ", 100) + "deep",
		"[a](http://[::1]:80/) [b](https://user:pw@host.example/) https://ex.example/'onmouseover='alert(1)",
	}
	raw := b.eval(`JSON.stringify(` + js(strings.Join(hostile, "\n\n")) + `.split("\n\n").map((src) => {
		const el = window.__mods.md.markdown(src);
		const bad = [];
		const ok = new Set(["DIV", "P", "BR", "STRONG", "EM", "DEL", "CODE", "PRE", "A", "UL", "OL", "LI", "H3", "H4", "H5", "H6", "BLOCKQUOTE", "HR"]);
		for (const e of el.querySelectorAll("*")) {
			if (!ok.has(e.tagName)) bad.push("element " + e.tagName);
			for (const a of e.attributes) {
				if (!["class", "href", "target", "rel", "start", "data-lang"].includes(a.name)) bad.push("attribute " + a.name + " on " + e.tagName);
				if (a.name === "href" && !/^https?:\/\//.test(a.value)) bad.push("href " + a.value);
			}
		}
		return {src, bad};
	}))`)
	var res []struct {
		Src string   `json:"src"`
		Bad []string `json:"bad"`
	}
	if err := json.Unmarshal([]byte(raw), &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != len(hostile) {
		t.Fatalf("rendered %d hostile texts, want %d", len(res), len(hostile))
	}
	for _, r := range res {
		if len(r.Bad) > 0 {
			t.Errorf("markdown(%q) built %v", r.Src, r.Bad)
		}
	}

	// The fold: a long text shows its first and last lines and hides the
	// rest until asked; a short one is whole.
	fold := func(src string) string {
		t.Helper()
		return b.eval(`(() => { const e = window.__mods.tr.fold(` + js(src) + `); return e.tagName + "|" + e.innerText; })()`)
	}
	var lines []string
	for i := 1; i <= 170; i++ {
		lines = append(lines, fmt.Sprintf("output line %03d", i))
	}
	long := strings.Join(lines, "\n") + "\n"
	got := fold(long)
	if !strings.HasPrefix(got, "DIV|") || !strings.Contains(got, "160 more lines") || !strings.Contains(got, lines[0]) || !strings.Contains(got, lines[169]) || strings.Contains(got, "\n"+lines[80]+"\n") {
		t.Errorf("fold of 170 lines: %q", got)
	}
	if got := fold("a\nb\nc"); got != "PRE|a\nb\nc" {
		t.Errorf("fold of 3 lines: %q", got)
	}
	b.noExceptions()
}
