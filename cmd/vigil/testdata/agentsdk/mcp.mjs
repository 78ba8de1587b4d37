// A program written for Claude Code with the Claude Agent SDK that gives
// the session an MCP server of its own (the mcpServers option, which the
// SDK passes as --mcp-config) and approves the model's call of its tool.
// It prints one JSON line per SDK message and callback.
//
//   node mcp.mjs <path to the executable> <scratch dir> <mcpServers JSON>
import { query } from '@anthropic-ai/claude-agent-sdk';

const [exe, cwd, servers] = process.argv.slice(2);
const log = (o) => process.stdout.write(JSON.stringify(o) + '\n');

const q = query({
  prompt: 'Look up the secret word with the words tool.',
  options: {
    pathToClaudeCodeExecutable: exe,
    cwd,
    permissionMode: 'default',
    mcpServers: JSON.parse(servers),
    canUseTool: async (toolName, input) => {
      log({ callback: 'canUseTool', tool: toolName, input });
      return { behavior: 'allow', updatedInput: input };
    },
    stderr: (s) => process.stderr.write(s),
  },
});

for await (const m of q) {
  const o = { type: m.type };
  if (m.subtype) o.subtype = m.subtype;
  if (m.type === 'system' && m.subtype === 'init') {
    o.mcp_servers = (m.mcp_servers ?? []).map((s) => `${s.name}:${s.status}`);
    o.has_tool = (m.tools ?? []).includes('mcp__words__lookup');
  }
  if (m.type === 'user' && Array.isArray(m.message.content)) {
    const r = m.message.content.find((b) => b.type === 'tool_result');
    if (!r) continue;
    o.result = typeof r.content === 'string' ? r.content : r.content.map((b) => b.text ?? '').join('');
  }
  if (m.type === 'assistant') continue;
  if (m.type === 'result') o.result = m.result;
  if (m.type === 'system' && m.subtype !== 'init') continue;
  log(o);
}
log({ done: true });
