// A program written for Claude Code with the Claude Agent SDK that uses
// its controls: partial messages (includePartialMessages), a permission
// callback that rewrites the command it allows (updatedInput),
// setPermissionMode (a mode the executable refuses, then one it takes),
// a background subagent whose progress it follows (task_progress), and
// maxTurns, which ends a prompt that keeps running commands. It
// prints one JSON line per SDK message, callback and control answer.
//
//   node controls.mjs <path to the executable> <scratch dir>
import { query } from '@anthropic-ai/claude-agent-sdk';

const [exe, cwd] = process.argv.slice(2);
const log = (o) => process.stdout.write(JSON.stringify(o) + '\n');

let permits = 0;
let wake = null;
const next = () => { permits++; if (wake) { wake(); wake = null; } };
const gate = async () => {
  while (permits === 0) await new Promise((r) => { wake = r; });
  permits--;
};
const user = (text) => ({ type: 'user', message: { role: 'user', content: text }, parent_tool_use_id: null, session_id: '' });
let q;
async function* prompts() {
  yield user('Say something, then write ORIGINAL to out.txt with Bash.');
  await gate();
  for (const mode of ['plan', 'acceptEdits']) {
    try {
      const r = await q.setPermissionMode(mode);
      log({ control: 'setPermissionMode', mode, ok: true, response: r ?? null });
    } catch (e) {
      log({ control: 'setPermissionMode', mode, ok: false, error: String(e.message ?? e) });
    }
  }
  yield user('Start a background agent that runs a command, then end your turn.');
  await gate(); // the launch turn
  await gate(); // the wake turn
  yield user('Keep running commands.');
  await gate(); // ended by maxTurns; then stdin closes
}

q = query({
  prompt: prompts(),
  options: {
    pathToClaudeCodeExecutable: exe,
    cwd,
    permissionMode: 'default',
    includePartialMessages: true,
    maxTurns: 2,
    canUseTool: async (toolName, input) => {
      log({ callback: 'canUseTool', tool: toolName, command: input.command ?? null });
      if (toolName === 'Bash' && String(input.command).includes('ORIGINAL')) {
        return { behavior: 'allow', updatedInput: { ...input, command: 'echo UPDATED | tee out.txt' } };
      }
      return { behavior: 'allow', updatedInput: input };
    },
    stderr: (s) => process.stderr.write(s),
  },
});

try {
for await (const m of q) {
  const o = { type: m.type };
  if (m.subtype) o.subtype = m.subtype;
  if (m.type === 'stream_event') {
    o.event = m.event.type;
    if (m.event.delta) o.delta = m.event.delta.text ?? m.event.delta.partial_json ?? m.event.delta.stop_reason ?? null;
    if (m.event.content_block) o.block = m.event.content_block.type;
    o.parent = m.parent_tool_use_id;
  }
  if (m.type === 'assistant' || m.type === 'user') {
    o.blocks = (Array.isArray(m.message.content) ? m.message.content : [{ type: 'text', text: m.message.content }])
      .map((b) => (b.type === 'text' ? { type: 'text', text: b.text } : b.type === 'tool_use' ? { type: 'tool_use', name: b.name } : { type: b.type, content: typeof b.content === 'string' ? b.content : JSON.stringify(b.content) }));
    o.subagent = m.parent_tool_use_id != null;
  }
  if (m.type === 'system' && m.subtype === 'init') o.permissionMode = m.permissionMode;
  if (m.type === 'system' && m.subtype === 'task_progress') {
    o.description = m.description;
    o.last_tool_name = m.last_tool_name;
    o.tool_uses = m.usage?.tool_uses;
  }
  if (m.type === 'system' && m.subtype === 'task_notification') o.summary = m.summary;
  if (m.type === 'result') {
    o.result = m.result;
    if (m.errors) o.errors = m.errors;
    o.num_turns = m.num_turns;
  }
  if (m.type === 'system' && (m.subtype === 'session_state_changed' || m.subtype === 'api_retry' || m.subtype === 'status')) continue;
  log(o);
  if (m.type === 'result') next();
}
} catch (e) {
  // The last turn ended in an error result: the executable exits 1, and
  // the SDK throws that result's error.
  log({ thrown: String(e.message ?? e) });
}
log({ done: true });
