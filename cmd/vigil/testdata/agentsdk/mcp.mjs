// A program written for Claude Code with the Claude Agent SDK that gives
// the session two MCP servers of its own (the mcpServers option): a stdio
// server, which the SDK passes in its initialize request, and one it
// hosts itself (createSdkMcpServer), which the executable reaches through
// mcp_message control requests; it approves the model's calls of their
// tools.
// It prints one JSON line per SDK message and callback.
//
//   node mcp.mjs <path to the executable> <scratch dir> <mcpServers JSON>
import { query, createSdkMcpServer, tool } from '@anthropic-ai/claude-agent-sdk';
import { z } from 'zod';

const [exe, cwd, servers] = process.argv.slice(2);
const log = (o) => process.stdout.write(JSON.stringify(o) + '\n');

const q = query({
  prompt: 'Look up the secret word with the words tool.',
  options: {
    pathToClaudeCodeExecutable: exe,
    cwd,
    permissionMode: 'default',
    mcpServers: {
      ...JSON.parse(servers),
      inproc: createSdkMcpServer({
        name: 'inproc',
        version: '1.0.0',
        tools: [tool('count', 'Count the letters of a word', { word: z.string() }, async ({ word }) => ({
          content: [{ type: 'text', text: `${word} has ${word.length} letters` }],
        }))],
      }),
    },
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
    o.mcp_servers = (m.mcp_servers ?? []).map((s) => `${s.name}:${s.status}`).sort();
    o.has_tool = (m.tools ?? []).includes('mcp__words__lookup') && (m.tools ?? []).includes('mcp__inproc__count');
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
