// Package ccwire makes vigil a Claude Code-compatible executable: it
// speaks the stream-json protocol of the Claude Code CLI (2.1.328) on
// stdin and stdout, so that a program written for Claude Code — the
// Claude Agent SDK's query() with pathToClaudeCodeExecutable pointing at
// vigil, or anything else that drives the CLI this way — drives one
// durable vigil session unchanged. cmd/vigil runs it when its arguments
// carry --output-format stream-json and --input-format stream-json and no
// subcommand.
//
// # What the Agent SDK sends
//
// Recorded from @anthropic-ai/claude-agent-sdk 0.3.334 (Node 20) with
// pathToClaudeCodeExecutable set to a script that logged its argv, its
// environment and its stdin and passed them on to the real CLI, for a
// query() with a streaming prompt, model, maxTurns, permissionMode
// "default", allowedTools, disallowedTools, cwd and canUseTool, and an
// interrupt():
//
//	argv: --output-format stream-json --verbose --input-format stream-json
//	      --max-turns=5 --model=claude-sonnet-4-5 --permission-prompt-tool=stdio
//	      --allowedTools=Read --disallowedTools=WebFetch --permission-mode=default
//	env:  CLAUDE_CODE_ENTRYPOINT=sdk-ts CLAUDE_AGENT_SDK_VERSION=0.3.334
//	      CLAUDE_CODE_SDK_READS_SESSION_STATE=1 (plus the program's environment)
//	stdin: {"request_id":"…","type":"control_request","request":{"subtype":"initialize","systemPrompt":[""]}}
//	       {"type":"user","message":{"role":"user","content":"hello"},"parent_tool_use_id":null,"session_id":""}
//	       {"request_id":"…","type":"control_request","request":{"subtype":"interrupt"}}
//
// The options are flags in the --flag=value form; cwd is the process's
// working directory, not a flag; --permission-prompt-tool=stdio comes
// with canUseTool. The SDK waits for the initialize response before it
// sends the first prompt, and answers can_use_tool requests with
// {"behavior":"allow","updatedInput":…} or {"behavior":"deny","message":…}.
// The CLI answered interrupt with {"still_queued":[]}, printed a user
// message "[Request interrupted by user]" and an error_during_execution
// result (terminal_reason aborted_streaming, no result field).
//
// # What vigil prints
//
// A Mapper turns the session's events into the CLI's frames, and a Server
// runs the protocol:
//   - each run of the main agent starts with system/init and ends with a
//     result (num_turns: its model rounds; usage and total_cost_usd: its
//     rounds' usage and cost; result_index counting the results; a wake
//     turn's result has origin {"kind":"task-notification"});
//   - the transcript's assistant messages are assistant frames with text
//     and tool_use blocks, its tool results user frames; a subagent's
//     carry parent_tool_use_id (the Agent call that started it), agent_id
//     and task_description. Prompts and notifications are not echoed, as
//     the CLI does not echo them;
//   - a background subagent or shell task prints background_tasks_changed
//     and task_started (with the tool_use_id of its call), and its end
//     task_updated, task_notification (status, summary: the agent's reply
//     or the CLI's "Background command … completed (exit code 0)") and
//     background_tasks_changed; a subagent's later run (a message resumed
//     it) prints task_started again with a new run_id;
//   - an assistant message is one frame per content block, all with the
//     message's id, as the CLI prints them;
//   - a background subagent's tool call prints task_progress ("Running
//     <the call's description>", the tokens, tool calls and time of its
//     run so far, last_tool_name), and its task_notification counts the
//     run's tool calls;
//   - with --include-partial-messages, the main agent's messages are also
//     stream_event frames (message_start, content_block_start/delta/stop,
//     message_delta, message_stop): its text as the model streams it
//     (vigil's live text.delta events), the rest — tool uses, text a slow
//     reader missed — when the message is committed, each block's
//     assistant frame before its content_block_stop;
//   - control requests: initialize, interrupt (cancels the main agent's
//     run), set_permission_mode (answered {"mode": …}; the session's
//     mode changes and pending requests the new mode decides are
//     answered; plan and auto are refused with error_code invalid_mode,
//     bypassPermissions without --dangerously-skip-permissions with
//     bypass_not_launched, as the CLI does). Others get an error response
//     that names them;
//   - vigil's permission requests (mode default, which is vigil's ask)
//     go to the program as can_use_tool control requests; the answer
//     allows or denies the call, and an allow's updatedInput is the input
//     the call runs with (the session's deny rules are checked against
//     it; one that is not a JSON object denies the call).
//
// --max-turns N bounds each prompt's run to N model rounds: a run whose
// model asks for one more ends round_limit, printed as the CLI's
// error_max_turns result ("Reached maximum number of turns (N)",
// num_turns N+1).
//
// The process ends when stdin is closed and the session is quiescent: no
// run, no live task, every inbox empty, as the CLI waits for its
// background agents after stdin's EOF. Like the CLI, it exits 1 when the
// last result it printed was an error (the SDK then throws that result's
// error).
//
// # Differences from the CLI
//
// cmd/vigil's TestAgentSDKSameAsClaudeCode runs one program against both
// and compares the messages it receives. The sequences of message kinds,
// texts, task statuses and summaries are the same; these fields of the
// CLI's messages vigil does not send: in system/init the CLI's fast-mode,
// ultrathink, effort, view-mode, analytics and feedback switches, memory
// paths, messaging socket, extra directories and terminal slash commands;
// in assistant messages the API's request_id and context_management; in
// user tool results the structured tool_use_result and tool_result_meta;
// in results the timing (ttft_ms, time_to_request_ms, …), fast-mode,
// safety_stops, subagent_stats, queued_turn_count and
// model_usage_since_last_result fields. TestAgentSDKControlsSameAsClaudeCode
// runs a second program (partial messages, updatedInput,
// setPermissionMode, task_progress) against both and lists where the
// sequences part. Also:
//   - the CLI takes permission modes plan and auto; vigil refuses them;
//   - the CLI runs a command it judges read-only (echo SUB-RAN) without
//     asking in mode acceptEdits; vigil asks for every command its rules
//     do not allow;
//   - the CLI trims a command's trailing newline from its tool result;
//   - session_id is vigil's session id, and is what --resume takes;
//   - the tools listed in system/init are vigil's; the slash commands,
//     skills, plugins and models of the initialize response are empty;
//   - MCP servers a program names (--mcp-config, or the Agent SDK's
//     mcpServers in the initialize request under --await-initialize,
//     answered mcp_servers_applied) are connected by vigil
//     (internal/mcpclient: stdio, http and sse servers); their tools are
//     offered to the session's models as mcp__<server>__<tool> and listed in
//     system/init with the servers' status. vigil starts a stdio server
//     with its allowlisted environment and the server's own env, not its
//     whole environment as the CLI does (no key reaches it). Servers the
//     SDK hosts in the program (createSdkMcpServer, named in the
//     initialize request's sdkMcpServers) are reached as the CLI reaches
//     them: each JSON-RPC message is an mcp_message control request to
//     the program, answered {"mcp_response": …}; prompts wait until every
//     one is connected or has failed (30 s each). The servers' tools live
//     in the process: after --resume the program names them again, as it
//     does for the CLI;
//   - other flags not listed in ParseArgs are refused;
//   - with --include-partial-messages, the stream events of a message
//     vigil's provider did not stream (tool uses, a subagent's messages)
//     come whole, one delta per block, when the message is committed, and
//     its message_stop before the permission request of its tool call
//     (the CLI asks first); the stream events carry no usage;
//   - permission modes plan and auto have no vigil counterpart and are
//     refused; dontAsk is vigil's auto (what the rules do not allow is
//     denied).
package ccwire
