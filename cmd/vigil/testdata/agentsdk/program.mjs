// A program written for Claude Code with the Claude Agent SDK: it starts a
// background subagent and waits for the wake turn that its end starts,
// sends a follow-up prompt whose tool call it approves in canUseTool,
// interrupts a turn from a tool call's permission callback, and sends a
// last prompt. It prints one JSON line per SDK message (and per callback)
// on stdout, for the test to compare.
//
//   node program.mjs <path to the executable> <scratch dir>
import { query } from '@anthropic-ai/claude-agent-sdk';

const [exe, cwd] = process.argv.slice(2);
const log = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// prompts is the program's input: each prompt after the first waits for
// a next() (a permit, so that one given early is not lost).
let permits = 0;
let wake = null;
const next = () => { permits++; if (wake) { wake(); wake = null; } };
const gate = async () => {
  while (permits === 0) await new Promise((r) => { wake = r; });
  permits--;
};
async function* prompts() {
  const user = (text) => ({ type: 'user', message: { role: 'user', content: text }, parent_tool_use_id: null, session_id: '' });
  yield user('Start a background agent to compute the answer, then end your turn.');
  await gate();
  yield user('Now write APPROVED-RAN to approved.txt with Bash.');
  await gate();
  yield user('Take your time on this one.');
  await gate();
  yield user('Say goodbye.');
  await gate(); // closes stdin: the executable exits once idle
}

const q = query({
  prompt: prompts(),
  options: {
    pathToClaudeCodeExecutable: exe,
    cwd,
    permissionMode: 'default',
    canUseTool: async (toolName, input) => {
      log({ callback: 'canUseTool', tool: toolName, input });
      if (String(input.command).includes('stop.txt')) {
        // The user stops the turn instead of answering.
        const r = await q.interrupt();
        log({ callback: 'interrupt', ok: r !== null });
        return { behavior: 'deny', message: 'The user interrupted the turn.' };
      }
      return { behavior: 'allow', updatedInput: input };
    },
    stderr: (s) => process.stderr.write(s),
  },
});

let results = 0;
for await (const m of q) {
  const o = { type: m.type, keys: Object.keys(m).sort() };
  if (m.type === 'assistant' || m.type === 'user') o.message_keys = Object.keys(m.message).sort();
  if (m.subtype) o.subtype = m.subtype;
  if (m.type === 'assistant' || m.type === 'user') {
    o.blocks = (Array.isArray(m.message.content) ? m.message.content : [{ type: 'text', text: m.message.content }])
      .map((b) => (b.type === 'text' ? { type: 'text', text: b.text } : b.type === 'tool_use' ? { type: 'tool_use', name: b.name } : { type: b.type }));
    o.subagent = m.parent_tool_use_id != null;
  }
  if (m.type === 'system' && m.subtype && m.subtype.startsWith('task_')) {
    o.task_type = m.task_type;
    if (m.status) o.status = m.status;
    if (m.summary) o.summary = m.summary;
  }
  if (m.type === 'result') {
    o.is_error = m.is_error;
    o.result = m.result;
    o.wake = !!(m.origin && m.origin.kind === 'task-notification');
    o.has_usage = typeof m.usage === 'object' && typeof m.total_cost_usd === 'number' && typeof m.num_turns === 'number';
  }
  if (m.type === 'system' && (m.subtype === 'session_state_changed' || m.subtype === 'api_retry' || m.subtype === 'status')) continue;
  log(o);
  if (m.type === 'result') {
    results++;
    // 1: the first turn; 2: the wake turn; 3: the follow-up; 4: the
    // interrupted one; 5: goodbye.
    if (results >= 2) next();
  }
}
log({ done: true });
