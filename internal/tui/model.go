package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/lipgloss"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
)

// Bounds on what the client keeps: the conversation's entries, the
// notifications listed beside it, and the live text of one agent.
const (
	maxEntries  = 2000
	maxNotes    = 50
	maxLiveText = 16 << 10
	// wideWidth is the narrowest terminal that shows the side pane beside
	// the conversation; a narrower one shows one or the other (Ctrl+T).
	wideWidth = 100
)

// live is an agent's text as it streams, until its round commits.
type live struct {
	name string
	text string
}

// model is the client's state.
type model struct {
	ctx  context.Context
	api  API
	opts Options
	send func(tea.Msg)

	session string
	gen     int // the stream's generation: messages of an older one are stale
	cancel  context.CancelFunc
	up      bool
	connErr error
	last    int64 // the last committed event shown
	gaps    int   // events the stream skipped (never expected)
	// reconnects counts the times the stream came back after a loss.
	reconnects int

	d          *detail
	refreshing bool
	dirty      bool

	tl       *vigil.Timeline
	entries  []*entry
	tools    map[string]*entry
	live     map[string]*live
	liveList []string
	notes    []string

	width, height int
	// The side pane shows beside the conversation in a wide terminal
	// unless hidden (Ctrl+T), and in a narrow one instead of it when
	// asked for (Ctrl+T).
	sideNarrow, hideWide bool
	expanded             bool
	conv                 viewport.Model
	// follow keeps the conversation at its end as it grows: until the
	// user scrolls up, and again once they scroll back down or send.
	follow    bool
	input     textinput.Model
	md        *glamour.TermRenderer
	mdWidth   int
	convDirty bool

	quitting bool
	fatal    error
}

func newModel(ctx context.Context, opts Options) *model {
	in := textinput.New()
	in.Prompt = "› "
	in.Placeholder = "a prompt · @agent message · /help"
	in.CharLimit = 0
	in.Focus()
	m := &model{
		ctx: ctx, api: opts.API, opts: opts, session: opts.Session,
		tools: map[string]*entry{}, live: map[string]*live{}, tl: vigil.NewTimeline(),
		input: in, conv: viewport.New(80, 20), width: 80, height: 24, follow: true,
	}
	m.conv.KeyMap = viewport.KeyMap{} // keys go to the input; PgUp/PgDn scroll
	return m
}

// tickMsg refreshes elapsed times and tails.
type tickMsg time.Time

// actionMsg is the answer to a request the user made.
type actionMsg struct {
	info string
	err  error
	// session, when set, is a session just created: follow it.
	session string
}

// sessionsMsg lists the server's sessions.
type sessionsMsg struct {
	list []vigil.SessionSummary
	err  error
}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// Init implements tea.Model.
func (m *model) Init() tea.Cmd {
	cmds := []tea.Cmd{textinput.Blink, tick()}
	if m.session != "" {
		m.startStream()
	} else {
		m.note("a new session starts with your first prompt; /sessions lists earlier ones, /session ID opens one")
	}
	if m.opts.Prompt != "" {
		cmds = append(cmds, m.submit(m.opts.Prompt, vigil.PriorityNext))
	}
	return tea.Batch(cmds...)
}

// startStream follows m.session from its first event.
func (m *model) startStream() {
	m.stopStream()
	m.gen++
	ctx, cancel := context.WithCancel(m.ctx)
	m.cancel = cancel
	gen, session, api, send := m.gen, m.session, m.api, m.send
	go follow(ctx, api, session, 0, gen, func(v any) { send(v) })
}

func (m *model) stopStream() {
	if m.cancel != nil {
		m.cancel()
		m.cancel = nil
	}
}

// reset forgets what the client shows of a session.
func (m *model) reset() {
	m.stopStream()
	m.up, m.connErr, m.last, m.gaps, m.reconnects, m.d = false, nil, 0, 0, 0, nil
	m.entries, m.tools, m.live, m.liveList, m.notes = nil, map[string]*entry{}, map[string]*live{}, nil, nil
	m.tl = vigil.NewTimeline()
	m.convDirty = true
}

// Update implements tea.Model.
func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	var cmds []tea.Cmd
	if k, ok := msg.(tea.KeyMsg); ok && k.Type == tea.KeyRunes && len(k.Runes) > 1 {
		// Several characters at once are typed text (a fast typist over
		// ssh, a paste without bracketed paste): text, never a key. The
		// input's key bindings compare a key's name, and the name of the
		// runes "up" or "left" is that of the arrow key, which would eat
		// them; a paste's name is bracketed and matches no binding.
		k.Paste = true
		msg = k
	}
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.convDirty = true
	case tea.KeyMsg:
		if cmd, done := m.key(msg); done {
			m.sync()
			return m, cmd
		} else if cmd != nil {
			cmds = append(cmds, cmd)
		}
	case eventMsg:
		if msg.gen == m.gen {
			m.onEvent(msg.ev)
			cmds = append(cmds, m.refresh())
		}
	case liveMsg:
		if msg.gen == m.gen {
			m.onLive(msg.d)
		}
	case connMsg:
		if msg.gen == m.gen {
			if !msg.up && m.up {
				m.note("connection to the server lost; reconnecting after event %d…", m.last)
			}
			if msg.up && !m.up && m.connErr != nil {
				m.reconnects++
				m.note("reconnected; resuming after event %d", m.last)
			}
			m.up, m.connErr = msg.up, msg.err
		}
	case detailMsg:
		if msg.gen == m.gen {
			m.refreshing = false
			if msg.err == nil {
				m.d = msg.d
			}
			if m.dirty {
				m.dirty = false
				cmds = append(cmds, m.refresh())
			}
		}
	case actionMsg:
		switch {
		case msg.err != nil:
			m.add(&entry{kind: entryError, text: msg.err.Error()})
		case msg.info != "":
			m.add(&entry{kind: entryInfo, text: msg.info})
		}
		if msg.session != "" {
			m.reset()
			m.session = msg.session
			m.startStream()
		}
	case sessionsMsg:
		m.showSessions(msg)
	case tickMsg:
		cmds = append(cmds, tick())
		if m.d != nil && m.tasksRunning() {
			cmds = append(cmds, m.refresh())
		}
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	cmds = append(cmds, cmd)
	m.sync()
	if m.quitting {
		return m, tea.Quit
	}
	return m, tea.Batch(cmds...)
}

// refresh reads the session again, one request at a time.
func (m *model) refresh() tea.Cmd {
	if m.session == "" {
		return nil
	}
	if m.refreshing {
		m.dirty = true
		return nil
	}
	m.refreshing = true
	ctx, api, session, gen := m.ctx, m.api, m.session, m.gen
	return func() tea.Msg {
		d, err := fetchDetail(ctx, api, session)
		return detailMsg{d: d, err: err, gen: gen}
	}
}

func (m *model) tasksRunning() bool {
	for _, t := range m.d.Tasks {
		if t.Ended.IsZero() {
			return true
		}
	}
	return false
}

// key handles a key; done means the input must not see it.
func (m *model) key(k tea.KeyMsg) (tea.Cmd, bool) {
	switch k.Type {
	case tea.KeyCtrlC:
		m.quitting = true
		return tea.Quit, true
	case tea.KeyEnter:
		prio := vigil.PriorityNext
		if k.Alt {
			prio = vigil.PriorityNow
		}
		return m.enter(prio), true
	case tea.KeyCtrlS:
		return m.enter(vigil.PriorityNow), true
	case tea.KeyEsc:
		if m.session == "" {
			return nil, true
		}
		return m.cancelRound("main"), true
	case tea.KeyTab:
		m.complete()
		return nil, true
	case tea.KeyCtrlT:
		m.toggleSide()
		return nil, true
	case tea.KeyCtrlO:
		m.expanded = !m.expanded
		m.convDirty = true
		return nil, true
	case tea.KeyPgUp:
		m.conv.HalfViewUp()
		m.follow = m.conv.AtBottom()
		return nil, true
	case tea.KeyPgDown:
		m.conv.HalfViewDown()
		m.follow = m.conv.AtBottom()
		return nil, true
	case tea.KeyRunes:
		if m.input.Value() == "" && len(k.Runes) == 1 && m.d != nil && len(m.d.Approvals) > 0 {
			p := m.d.Approvals[0]
			switch k.Runes[0] {
			case 'y':
				return m.answer(string(p.ID), true, false), true
			case 'n':
				return m.answer(string(p.ID), false, false), true
			case 'a':
				return m.answer(string(p.ID), true, true), true
			}
		}
	}
	return nil, false
}

// enter sends what the input holds: a /command, an @agent message or a
// prompt to the main agent at prio.
func (m *model) enter(prio vigil.Priority) tea.Cmd {
	v := strings.TrimSpace(m.input.Value())
	if v == "" {
		return nil
	}
	m.input.SetValue("")
	// What is sent, and what it brings, shows at the bottom.
	m.follow, m.convDirty = true, true
	switch {
	case strings.HasPrefix(v, "/"):
		return m.command(v)
	case strings.HasPrefix(v, "@"):
		name, txt, _ := strings.Cut(v[1:], " ")
		txt = strings.TrimSpace(txt)
		if name == "" || txt == "" {
			m.add(&entry{kind: entryError, text: "write @name text: the agent's name, then the message"})
			return nil
		}
		return m.message(name, txt, prio)
	}
	return m.submit(v, prio)
}

// submit sends a prompt to the main agent, creating the session with it
// when there is none yet.
func (m *model) submit(txt string, prio vigil.Priority) tea.Cmd {
	ctx, api := m.ctx, m.api
	if m.session == "" {
		body := map[string]any{}
		for k, v := range m.opts.New {
			body[k] = v
		}
		body["prompt"] = txt
		return func() tea.Msg {
			b, err := api.Do(ctx, "POST", "/api/sessions", body)
			if err != nil {
				return actionMsg{err: fmt.Errorf("create a session: %w", err)}
			}
			var d vigil.SessionDetail
			if err := json.Unmarshal(b, &d); err != nil {
				return actionMsg{err: fmt.Errorf("create a session: decode answer: %w", err)}
			}
			return actionMsg{info: "session " + string(d.Session.ID) + " created", session: string(d.Session.ID)}
		}
	}
	path := m.path("prompts")
	return func() tea.Msg {
		_, err := api.Do(ctx, "POST", path, map[string]any{"text": txt, "priority": prio})
		if err != nil {
			return actionMsg{err: fmt.Errorf("send the prompt: %w", err)}
		}
		return actionMsg{}
	}
}

// message sends a message to an agent and says what happened to it.
func (m *model) message(name, txt string, prio vigil.Priority) tea.Cmd {
	if m.session == "" {
		m.add(&entry{kind: entryError, text: "no session yet: send a prompt first"})
		return nil
	}
	ctx, api, path := m.ctx, m.api, m.path("agents", name, "messages")
	return func() tea.Msg {
		b, err := api.Do(ctx, "POST", path, map[string]any{"text": txt, "priority": prio})
		if err != nil {
			return actionMsg{err: fmt.Errorf("message %s: %w", name, err)}
		}
		var msg vigil.Message
		if err := json.Unmarshal(b, &msg); err != nil {
			return actionMsg{err: fmt.Errorf("message %s: decode answer: %w", name, err)}
		}
		if msg.Outcome == vigil.OutcomeRejected {
			// Told here: a message to no agent commits nothing the
			// stream could show.
			return actionMsg{err: fmt.Errorf("message to %s rejected: %s", name, msg.Reason)}
		}
		// Its outcome is the message.sent line the stream brings.
		return actionMsg{}
	}
}

// cancelRound cancels agent's round in flight.
func (m *model) cancelRound(agent string) tea.Cmd {
	return m.post("agents/"+url.PathEscape(agent)+"/cancel", nil, "cancelling "+agent+"'s round in flight", true)
}

// answer answers a permission request.
func (m *model) answer(id string, allow, always bool) tea.Cmd {
	what := "deny " + id
	switch {
	case always:
		what = "allow " + id + " always"
	case allow:
		what = "allow " + id
	}
	// The stream tells the answer: "permission p1 allowed by user".
	return m.post("approvals/"+url.PathEscape(id), map[string]any{"allow": allow, "always": always}, what, false)
}

// post sends a POST under the session. what says what it does: an error
// names it, and with say the client notes it when it succeeds. Actions
// whose committed event the stream shows (a hold, a retry) are not noted,
// so that the conversation tells each thing once.
func (m *model) post(sub string, body any, what string, say bool) tea.Cmd {
	if m.session == "" {
		m.add(&entry{kind: entryError, text: "no session yet: send a prompt first"})
		return nil
	}
	ctx, api, path := m.ctx, m.api, "/api/sessions/"+url.PathEscape(m.session)+"/"+sub
	return func() tea.Msg {
		if _, err := api.Do(ctx, "POST", path, body); err != nil {
			return actionMsg{err: fmt.Errorf("%s: %w", what, err)}
		}
		if !say {
			return actionMsg{}
		}
		return actionMsg{info: what}
	}
}

func (m *model) path(parts ...string) string {
	p := "/api/sessions/" + url.PathEscape(m.session)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// note adds the client's own line to the conversation.
func (m *model) note(format string, args ...any) {
	m.add(&entry{kind: entryInfo, text: fmt.Sprintf(format, args...)})
}

func (m *model) add(e *entry) {
	if e.at.IsZero() {
		e.at = time.Now()
	}
	m.entries = append(m.entries, e)
	if len(m.entries) > maxEntries {
		drop := m.entries[:len(m.entries)-maxEntries]
		for _, d := range drop {
			if d.tool != nil {
				delete(m.tools, d.tool.useID)
			}
		}
		m.entries = append([]*entry(nil), m.entries[len(drop):]...)
	}
	m.convDirty = true
}

// onEvent shows a committed event.
func (m *model) onEvent(ev vigil.Event) {
	if ev.Seq <= m.last {
		return // shown already
	}
	if m.last > 0 && ev.Seq > m.last+1 {
		m.gaps += int(ev.Seq - m.last - 1)
		m.add(&entry{kind: entryError, text: fmt.Sprintf("events %d to %d were not received", m.last+1, ev.Seq-1)})
	}
	m.last = ev.Seq
	name := func(id string) string { return m.d.agentName(vigil.AgentID(id)) }
	switch ev.Type {
	case "transcript.appended":
		var b struct {
			Agent   string       `json:"agent"`
			Message chat.Message `json:"message"`
		}
		if json.Unmarshal(ev.Data, &b) == nil && b.Message.Role == chat.RoleAssistant {
			if t := strings.TrimSpace(b.Message.PlainText()); t != "" {
				m.add(&entry{kind: entryText, at: ev.At, who: name(b.Agent), text: t})
			}
		}
	case "tool.started":
		var b struct {
			Agent string `json:"agent"`
			Call  struct {
				UseID string          `json:"use_id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"call"`
		}
		if json.Unmarshal(ev.Data, &b) == nil {
			e := &entry{kind: entryTool, at: ev.At, who: name(b.Agent), tool: &toolCall{useID: b.Call.UseID, name: b.Call.Name, input: b.Call.Input}}
			m.tools[b.Call.UseID] = e
			m.add(e)
		}
		_, _, _ = m.tl.Line(ev) // the timeline learns as it goes
		return
	case "tool.finished":
		var b struct {
			UseID   string `json:"use_id"`
			Result  string `json:"result"`
			IsError bool   `json:"is_error"`
		}
		if json.Unmarshal(ev.Data, &b) == nil {
			if e := m.tools[b.UseID]; e != nil {
				e.tool.done, e.tool.result, e.tool.isError = true, b.Result, b.IsError
				m.convDirty = true
			}
		}
	case "item.enqueued":
		var b struct {
			Item struct {
				Kind     string `json:"kind"`
				From     string `json:"from"`
				Text     string `json:"text"`
				Priority string `json:"priority"`
			} `json:"item"`
		}
		if json.Unmarshal(ev.Data, &b) == nil && b.Item.Kind == "prompt" && b.Item.From == "user" {
			t := b.Item.Text
			if b.Item.Priority != "" && b.Item.Priority != string(vigil.PriorityNext) {
				t += styleDim.Render("  (" + b.Item.Priority + ")")
			}
			m.add(&entry{kind: entryUser, at: ev.At, who: "you", text: t})
		}
	case "model.ended", "run.ended":
		var b struct {
			Agent string `json:"agent"`
		}
		if json.Unmarshal(ev.Data, &b) == nil {
			m.dropLive(b.Agent)
		}
	}
	line, ok, err := m.tl.Line(ev)
	if err != nil || !ok {
		return
	}
	txt := line.Text
	if ev.Type == "run.ended" && strings.Contains(txt, " completed: ") {
		// Its reply is the agent's text just shown.
		txt, _, _ = strings.Cut(txt, ": ")
	}
	m.add(&entry{kind: entryLine, at: ev.At, who: line.Who, text: txt})
	if ev.Type == "notification.written" {
		m.notes = append(m.notes, line.Text)
		if len(m.notes) > maxNotes {
			m.notes = m.notes[len(m.notes)-maxNotes:]
		}
	}
}

// onLive adds a text delta to its agent's live text.
func (m *model) onLive(d liveDelta) {
	l := m.live[d.Agent]
	if l == nil {
		l = &live{name: d.Name}
		if l.name == "" {
			l.name = m.d.agentName(vigil.AgentID(d.Agent))
		}
		m.live[d.Agent] = l
		m.liveList = append(m.liveList, d.Agent)
	}
	switch {
	case d.Reset:
		l.text = ""
	case d.Dropped:
		l.text += " … "
	}
	l.text += d.Text
	if len(l.text) > maxLiveText {
		l.text = "…" + l.text[len(l.text)-maxLiveText:]
	}
	m.convDirty = true
}

func (m *model) dropLive(agent string) {
	if _, ok := m.live[agent]; !ok {
		return
	}
	delete(m.live, agent)
	for i, a := range m.liveList {
		if a == agent {
			m.liveList = append(m.liveList[:i], m.liveList[i+1:]...)
			break
		}
	}
	m.convDirty = true
}

func (m *model) showSessions(msg sessionsMsg) {
	if msg.err != nil {
		m.add(&entry{kind: entryError, text: "list sessions: " + msg.err.Error()})
		return
	}
	if len(msg.list) == 0 {
		m.note("no sessions")
		return
	}
	list := msg.list
	if len(list) > 15 {
		list = list[len(list)-15:]
	}
	m.note("sessions (open one with /session ID):")
	for _, s := range list {
		state := "open"
		if s.Closed {
			state = "closed"
		}
		line := fmt.Sprintf("  %s  %-6s %s  %s", s.ID, state, s.Updated.Local().Format("01-02 15:04"), oneLine(s.Title))
		if len(s.NeedsYou) > 0 {
			// What only a person can end, as the sessions list says it.
			line += " · ⚠ needs you: " + strings.Join(s.NeedsYou, "; ")
		}
		m.note("%s", line)
	}
}

// showSide says whether the side pane shows.
func (m *model) showSide() bool {
	if m.width >= wideWidth {
		return !m.hideWide
	}
	return m.sideNarrow
}

// toggleSide shows or hides the side pane at the terminal's width.
func (m *model) toggleSide() {
	if m.width >= wideWidth {
		m.hideWide = !m.hideWide
	} else {
		m.sideNarrow = !m.sideNarrow
	}
	m.convDirty = true
}

// layout is where the panes go.
func (m *model) layout() (convW, sideW, bodyH int) {
	bodyH = max(m.height-2-len(m.approvalLines())-len(m.hintLines()), 3)
	switch {
	case !m.showSide():
		return m.width, 0, bodyH
	case m.width < wideWidth:
		return 0, m.width, bodyH
	}
	sideW = min(max(m.width/3, 32), 56)
	return m.width - sideW - 1, sideW, bodyH
}

// sync redraws the conversation when it changed.
func (m *model) sync() {
	convW, _, bodyH := m.layout()
	if convW <= 0 {
		return
	}
	if m.conv.Width != convW || m.conv.Height != bodyH {
		m.conv.Width, m.conv.Height = convW, bodyH
		m.convDirty = true
	}
	m.input.Width = max(m.width-4, 10)
	if !m.convDirty {
		return
	}
	m.convDirty = false
	if m.md == nil || m.mdWidth != convW {
		m.mdWidth = convW
		m.md, _ = glamour.NewTermRenderer(glamour.WithStandardStyle("dark"), glamour.WithWordWrap(max(convW-4, 20)))
	}
	var b strings.Builder
	for i, e := range m.entries {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(renderEntry(e, convW, m.expanded, m.md))
	}
	for _, a := range m.liveList {
		l := m.live[a]
		b.WriteString("\n" + styleWho.Render(l.name) + styleDim.Render(" (streaming)") + "\n")
		b.WriteString(lipgloss.NewStyle().Width(convW).Render(styleLive.Render(l.text + "▍")))
	}
	m.conv.SetContent(b.String())
	if m.follow {
		m.conv.GotoBottom()
	}
}

// View implements tea.Model.
func (m *model) View() string {
	if m.quitting {
		return ""
	}
	convW, sideW, bodyH := m.layout()
	var body string
	switch {
	case sideW == 0:
		body = m.conv.View()
	case convW == 0:
		body = m.sideView(sideW, bodyH)
	default:
		sep := styleDim.Render(strings.TrimRight(strings.Repeat("│\n", bodyH), "\n"))
		body = lipgloss.JoinHorizontal(lipgloss.Top, lipgloss.NewStyle().Width(convW).Height(bodyH).Render(m.conv.View()), sep, m.sideView(sideW, bodyH))
	}
	parts := []string{body}
	parts = append(parts, m.approvalLines()...)
	parts = append(parts, m.input.View())
	parts = append(parts, m.hintLines()...)
	parts = append(parts, m.statusLine())
	return strings.Join(parts, "\n")
}

// approvalLines are the permission requests waiting, with their keys.
func (m *model) approvalLines() []string {
	if m.d == nil || len(m.d.Approvals) == 0 {
		return nil
	}
	var out []string
	for i, p := range m.d.Approvals {
		if i == 2 {
			out = append(out, styleWarn.Render(fmt.Sprintf("  … and %d more (/approve ID, /deny ID)", len(m.d.Approvals)-2)))
			break
		}
		line := fmt.Sprintf("⚠ %s: %s wants %s %s", p.ID, m.d.agentName(p.Agent), p.Tool, oneLine(string(p.Input)))
		out = append(out, styleWarn.Render(truncate(line, m.width)))
	}
	out = append(out, truncate(fmt.Sprintf("  %s: [y] allow once  [n] deny  [a] always allow", m.d.Approvals[0].ID), m.width))
	return out
}

// statusLine is the bottom line: the session, the connection, the keys.
func (m *model) statusLine() string {
	conn := "● live"
	if m.reconnects > 0 {
		conn += fmt.Sprintf(" (reconnected %d×)", m.reconnects)
	}
	switch {
	case m.session == "":
		conn = "no session yet"
	case !m.up && m.connErr != nil:
		conn = "◌ reconnecting…"
	case !m.up:
		conn = "◌ connecting…"
	}
	var parts []string
	if m.session != "" {
		parts = append(parts, m.session)
	}
	if m.opts.Where != "" && m.width >= wideWidth {
		parts = append(parts, m.opts.Where)
	}
	parts = append(parts, conn)
	if m.session != "" {
		parts = append(parts, fmt.Sprintf("seq %d", m.last))
	}
	if m.d != nil {
		if m.d.Hold != nil {
			parts = append(parts, "HELD")
		}
		if n := len(m.d.Approvals); n > 0 {
			parts = append(parts, fmt.Sprintf("needs you: %d approval(s)", n))
		} else if m.d.Quiescent {
			parts = append(parts, "quiescent")
		} else if main := m.d.mainAgent(); main != nil && main.Run != nil {
			// What the session waits on first: main's why.
			parts = append(parts, "main: "+m.d.whyOf(*main))
		}
	}
	if m.gaps > 0 {
		parts = append(parts, fmt.Sprintf("MISSED %d", m.gaps))
	}
	parts = append(parts, "^S now · Esc cancel · ^T side · ^O unfold · /help")
	s := truncate(" "+strings.Join(parts, " · "), m.width)
	return styleStatus.Render(s + strings.Repeat(" ", max(m.width-lipgloss.Width(s), 0)))
}
