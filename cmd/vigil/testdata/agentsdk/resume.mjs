// A program written for Claude Code with the Claude Agent SDK, in two
// halves. "start" starts a background subagent and keeps the session open
// (the test kills the executable with SIGKILL while the subagent runs);
// "resume SESSION" resumes the session with a question and waits for the
// turn that the subagent's result wakes. It prints one JSON line per SDK
// message on stdout.
//
//   node resume.mjs <executable> <dir> start
//   node resume.mjs <executable> <dir> resume <session id>
import { query } from '@anthropic-ai/claude-agent-sdk';

const [exe, cwd, mode, session] = process.argv.slice(2);
const log = (o) => process.stdout.write(JSON.stringify(o) + '\n');

let finish;
const finished = new Promise((r) => { finish = r; });
async function* prompts() {
  const text = mode === 'start' ? 'Start a background agent to compute the answer, then end your turn.' : 'What did the agent find?';
  yield { type: 'user', message: { role: 'user', content: text }, parent_tool_use_id: null, session_id: '' };
  await finished;
}

const options = { pathToClaudeCodeExecutable: exe, cwd, permissionMode: 'bypassPermissions', allowDangerouslySkipPermissions: true };
if (mode === 'resume') options.resume = session;
try {
  for await (const m of query({ prompt: prompts(), options })) {
    const o = { type: m.type, session_id: m.session_id };
    if (m.subtype) o.subtype = m.subtype;
    if (m.type === 'result') {
      o.result = m.result;
      o.wake = !!(m.origin && m.origin.kind === 'task-notification');
      if (o.wake && String(m.result).includes('42')) finish();
    }
    if (m.type === 'system' && m.subtype === 'task_notification') o.summary = m.summary;
    log(o);
  }
  log({ done: true });
} catch (e) {
  // The start half ends here when its executable is killed.
  log({ error: String(e.message || e).split('\n')[0] });
}
