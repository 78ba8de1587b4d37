// Package codex runs agents on the Codex CLI: a provider.SessionDriver
// that keeps one long-lived `codex app-server` process per agent, opens
// the agent's thread in it, feeds it vigil's inbox items as turns and maps
// the notifications it sends to core inputs, as they come.
//
// # Protocol (verified on the CLI 0.169.0)
//
// The app-server speaks JSON-RPC 2.0 over stdio, one message a line, with
// no "jsonrpc" member (`codex app-server generate-json-schema` prints the
// schema). The driver sends initialize (clientInfo, capabilities
// experimentalApi), the initialized notification, then thread/start
// {cwd, model, approvalPolicy, sandbox} or, to resume,
// thread/resume {threadId, excludeTurns: true, ...}; the answer's thread.id
// is the agent's provider session (core.ExternalTurnStarted.Session), kept
// by vigil for the next process. A delivery is turn/start {threadId, input:
// [{type "text", text, text_elements: []}]} when the thread is idle, and
// turn/steer {threadId, input, expectedTurnId} while a turn is in progress
// (a turn/start the driver sent is waited for until turn/started comes). A
// cancel is turn/interrupt {threadId, turnId}; the turn ends with
// turn/completed status "interrupted". Codex's approval requests
// (item/commandExecution/requestApproval, item/fileChange/requestApproval)
// are vigil's permission requests (below); its other requests
// (item/tool/requestUserInput, MCP elicitations, ...) are answered at once
// with error -32601, so Codex never waits on vigil for them. Answers to
// the driver's requests come before the notifications they cause
// (turn/start's answer before turn/started).
//
// # Mapping (verified on the CLI 0.169.0)
//
//   - turn/started of the agent's thread starts a turn:
//     core.ExternalTurnStarted with the thread id. turn/completed ends it:
//     core.ExternalTurnEnded whose Result is the turn's last agentMessage
//     (the error's message, IsError, for status "failed"; Interrupted for
//     "interrupted"), whose Usage sums the turn's
//     thread/tokenUsage/updated "last" breakdowns (input less cached
//     input, cached input as cache reads), and NumTurns counts them (one
//     per model response).
//   - item/completed agentMessage is an assistant text message
//     (core.ExternalMessage); a commandExecution is an exec_command
//     tool_use at item/started and its tool_result (aggregatedOutput, an
//     error when the exit code is not 0) at item/completed; a
//     collabAgentToolCall (spawnAgent, wait, sendInput, closeAgent,
//     resumeAgent) is a tool_use named spawn_agent, wait_agent, ... with
//     its result (status and agentsStates); mcpToolCall, dynamicToolCall,
//     fileChange, webSearch and imageView are a tool_use and a result too.
//     reasoning, plan, the deltas and the thread and account notifications
//     are counted and passed over (at debug). The agent's own userMessage
//     items are in its transcript already and are passed over, except the
//     input of a wake turn.
//   - Sub-agents. With the multi_agent feature (on by default in 0.169.0;
//     multi_agent_v2 is off) the model has spawn_agent, wait_agent,
//     send_input, resume_agent and close_agent, in namespace
//     multi_agent_v1. A sub-agent is a thread of its own in the same
//     process: spawnAgent's item names it (receiverThreadIds, its owner in
//     senderThreadId, its prompt), and its turns come as turn/started,
//     items and turn/completed with its thread id. Each of its turns is a
//     run of a mirrored agent (core.ExternalTask kind agent, id the thread
//     id, running at turn/started; at turn/completed its end with
//     Notify, the turn's last message as Summary, status completed,
//     failed, or stopped for an interrupted turn); its items carry Mirror
//     = its thread id. Sub-agents get no multi_agent tools (measured:
//     their requests list none), so they spawn none; a command a
//     sub-agent runs is owned by its mirrored agent.
//   - Commands. exec_command runs a command in a PTY and answers the call
//     after yield_time_ms (250 ms to 30 s, 10 s by default); a command still
//     running then is left running ("Process running with session ID N")
//     and the model goes on. The driver mirrors as a background task
//     (core.ExternalTask kind shell, id the call id) every command still
//     running when an item of a later model response of its thread starts,
//     or when its turn ends. Its item/completed comes when it exits, after
//     the turn's turn/completed if the turn is over: it ends the task,
//     notified, status completed (exit 0), failed, or stopped when vigil
//     stopped it, with "exit code N" and the output's tail as Summary.
//     A limit of 0.169.0, measured (testdata/CommandEndsBeforeNextResponse
//     .jsonl): a command that outlives its yield but ends before the next
//     model response's first item is reported exactly like one that ended
//     within its yield (no item, field or notification marks the yield;
//     thread/items/list holds no function call output either), so it is
//     mapped as a foreground command: its output is its tool result, with
//     no task and no wake, though the model was told it runs on.
//   - Wakes. Codex starts no turn when a sub-agent or a background command
//     ends (measured: the owner stays idle; the end of a sub-agent's first
//     turn, the one spawn_agent began, is queued as a
//     <subagent_notification> in the owner's next turn, the end of a later
//     turn is not, and a command's end is not shown to the model at all).
//     The driver wakes the owner, the agent's thread or a sub-agent's
//     (turn/start on a sub-agent's thread works): once the owner's thread
//     is idle (at once, or at the end of the turn in progress), it starts
//     a turn on it whose input lists the ended work as <task_notification>
//     JSON objects (task_id, kind, status; for a sub-agent its result, for
//     a command its command, exit code and output tail). That turn is a
//     provider-wake run that takes those notifications, which vigil
//     recorded under their own keys (core.DeliverProvider). The end of work
//     that comes while its owner is in a turn (or while a turn of it is
//     being started) is held and passed on when that turn ends, since
//     Codex shows that turn nothing of it: the wake that follows is the run
//     that takes the notification. What is still held when the process
//     exits, and work that ends after the driver began to end the process,
//     is passed on as a status update, not notified: the exit ends it
//     lost, with a notification in the owner's inbox.
//   - An interrupt of the agent's turn does not stop its sub-agents; a
//     StopTask of a sub-agent interrupts that sub-agent's turn (or, when it
//     is idle, reports it stopped: core.ExternalTask status stopped, no
//     Notify). The app-server has no request that ends a command it runs
//     (command/exec/terminate is for commands the client started), and the
//     processId it reports is a unified-exec session number, not a pid
//     (measured: no such /proc entry). A command's process is found by its
//     environment instead, which Codex gives CODEX_THREAD_ID and
//     CODEX_TOOL_CALL_ID: StopTask kills its process group, and Codex
//     reports the command's end.
//
// # Process lifecycle
//
// Codex runs in a process group of its own with Pdeathsig SIGKILL (it is
// started from a thread locked for its whole life), in SessionStart.Cgroup
// when vigil has cgroups, with the environment's allowlist (internal/cmdenv)
// plus Options.Env, CODEX_HOME (Options.Home), the API key under
// Options.APIKeyEnv, RUST_LOG emptied, and VIGIL_SESSION set to the vigil
// session so an operator can find it; no other VIGIL_ setting reaches it.
// Codex passes its whole environment to the commands it runs (measured:
// the key was in a command's environment), so with a key the driver adds
// -c shell_environment_policy.ignore_default_excludes=false (Codex then
// drops *KEY*, *SECRET* and *TOKEN* variables) and an exclude of the key's
// variable; Options.Config comes after. The key is never logged. Each
// command Codex runs leads a session (and a PTY) of its own, beyond
// Codex's group: the driver finds those processes as the commands start
// and kills what is left of them when Codex exits. Codex exits at the end
// of its stdin: Close closes stdin, sends SIGTERM to the group after
// CloseGrace and SIGKILL after another. When the process exits for any
// reason, every line already read is mapped and emitted, then exactly one
// core.ProviderExited whose reason holds the cause, the exit status and
// the tail of stderr: vigil ends the mirrored tasks lost, with
// notifications, and hands a run the process never began (no
// turn/started) to a new process, which resumes the thread. Every process
// of a driver shares CODEX_HOME, where Codex keeps the threads' rollouts
// that thread/resume reads back; a thread that cannot be resumed is
// replaced by a new one, at warn.
//
// Idle release (Options.IdleRelease; vigil's CLI sets 10 minutes) ends a
// process once its thread is open and it has printed nothing and been
// handed nothing for that long, with no turn in progress or being started
// on any of its threads, no command running, no approval request waiting
// and no wake owed. Live work defers it without bound, so a release never
// ends work as lost. The next delivery starts a new process, which
// resumes the thread.
//
// # Permissions (verified on the CLI 0.169.0)
//
// A thread's approvalPolicy and sandbox follow the session's mode when
// the process opens it:
//   - bypass: "never" and "danger-full-access": nothing is asked;
//   - auto: "on-request" and "workspace-write": commands run in the
//     sandbox (writes in the working directory and the temporary
//     directories; elsewhere "Read-only file system") without asking, and
//     Codex asks only to run one outside it;
//   - ask and accept-edits: "untrusted" and "workspace-write": Codex asks
//     before every command it does not know to be safe.
//
// A request is a core.ExternalPermission of the agent (Tool Bash with the
// model's command line, taken out of a system shell's "/bin/bash -lc
// '…'"; or Tool apply_patch with every path of the file change, which
// Codex asks for only when the patch leaves its sandbox and then applies
// itself, so that accept-edits does not allow it by kind and an
// apply_patch rule or a person decides; UseID the item), which the
// session's rules decide or a person answers; AnswerPermission answers it accept or
// decline (Codex tells the model "rejected by user"). Measured: Codex runs
// a command it asked about and was allowed outside its sandbox; it has no
// "accept, sandboxed". An allow with a changed input is declined (Codex
// takes none). A request Codex withdraws (serverRequest/resolved before an
// answer: its turn was interrupted) is withdrawn in vigil, and its command,
// which never ran, is closed at the turn's end rather than mirrored as a
// task. A mode changed later (SetPermissionMode) reaches a thread when a
// new process opens it; until then vigil's rules still decide every
// request the thread's policy sends.
package codex
