// Package claudecode runs agents on the Claude Code CLI: a
// provider.SessionDriver that keeps one long-lived `claude -p
// --input-format stream-json --output-format stream-json --verbose`
// process per agent, feeds it vigil's inbox items as user messages and
// maps what it prints to core inputs, as it happens.
//
// # Mapping (verified on the CLI 2.1.328)
//
//   - system/init starts a turn: core.ExternalTurnStarted with the CLI's
//     session id (kept for --resume). The init is held until the turn shows
//     content: a turn that ends with an empty result (num_turns 0, result
//     "") is the no-op turn the CLI runs when it takes task notifications
//     from its queue before the wake turn that answers them (and after
//     --resume); both frames are passed over and counted.
//   - assistant and user messages of the main agent become
//     core.ExternalMessage (text, tool_use and tool_result blocks; thinking
//     and other blocks are left out); those of a subagent (agent_id, or
//     parent_tool_use_id) carry Mirror = the subagent's task id.
//   - result ends the turn: core.ExternalTurnEnded, Wake when origin.kind is
//     "task-notification". An interrupted turn ends with is_error and
//     subtype error_during_execution (terminal_reason aborted_streaming).
//   - system/task_started, task_updated and task_notification become
//     core.ExternalTask (local_agent, remote_agent, in_process_teammate:
//     agent tasks; local_bash and other background jobs: shell tasks). A
//     started task is held until the tool result that launched it, which
//     names its output file. A foreground command inside a subagent that ran
//     over ~3 s (owned_by_subagent, is_backgrounded false) is not a task of
//     the session: its frames are left out. Without a task type the kind
//     comes from the id ("b" + 8 base-36 characters for a command, "a" + 16
//     hex digits for an agent). After --resume the CLI reports, as stopped,
//     the tasks its previous process left unfinished; vigil ended those
//     lost when that process exited, so frames about a task this process
//     never saw start are passed over (logged at info, counted).
//   - system/background_tasks_changed sets the live set (idle release
//     waits for it); a task in it that never reported task_started is
//     mirrored as running.
//   - Other frames (task_progress, status, permission_denied, stream
//     events...) are logged at debug; a line that is not JSON, or a frame
//     whose fields have unexpected types, is dropped at warn. All of it is
//     counted (Driver.Stats).
//
// # Input and control protocol (verified on the CLI 2.1.328)
//
// A delivery is {"type":"user","message":{"role":"user","content":TEXT},
// "parent_tool_use_id":null,"priority":P}; the CLI's schema takes priority
// "now", "next" or "later", and "now" aborts a turn in progress. A line
// that is not JSON makes the CLI exit with status 1. Control requests are
// {"type":"control_request","request_id":ID,"request":{"subtype":...}}
// and are answered by {"type":"control_response","response":{"subtype":
// "success"|"error","request_id":ID,...}}:
//
//   - interrupt: answered {"still_queued":[]}; the turn in progress ends
//     with a "[Request interrupted by user]" user message and an error
//     result. Idle, it is acknowledged too.
//   - stop_task {"task_id":ID}: answered {}; the task ends (task_updated
//     killed, task_notification stopped, no wake turn). An unknown id is
//     acknowledged too. A subagent stopped between its runs (waiting on a
//     command of its own) gets task_updated killed and no notification; a
//     subagent stopped in a model round notifies stopped and then echoes
//     "[Request interrupted by user]", which starts no run. Either way the
//     CLI kills the subagent's own commands, notifies them stopped, and
//     delivers those notifications to no turn: the core hands them to the
//     main agent's inbox (TestSubagentStoppedBeforeItsBackgroundBash).
//   - an unknown subtype is refused: subtype error, error_code
//     unsupported_request.
//
// Control requests the CLI sends its host (permission prompts, say) are
// refused, so it never waits; in print mode without a host it denies what
// would need a prompt (system/permission_denied).
//
// # Process lifecycle
//
// The CLI runs in a process group of its own with Pdeathsig SIGKILL (it
// is started from a thread locked for its whole life), with VIGIL_SESSION
// set to the vigil session so an operator can find it. It takes no turn
// until it is handed a message (with --resume it may first report the
// previous process's unfinished tasks on its own). Its stdin stays open
// until the driver ends it: the CLI exits at the end of stdin only once its
// background tasks are done. Close closes stdin, sends SIGTERM to the
// group after CloseGrace and SIGKILL after another. The CLI runs shell
// commands in sessions of their own, beyond its group: the driver records
// those groups as they start and kills what is left of them when the CLI
// exits. When the process exits for any reason, every frame already read
// is emitted, then exactly one core.ProviderExited whose reason holds the
// cause, the exit status and the tail of stderr. Task notifications that
// the CLI prints after the driver began to end it are passed on as status
// updates: no turn will deliver them, so the exit ends those tasks lost
// with a notification to their owner.
//
// Idle release ends a process with no turn in progress, no delivery
// unanswered and no frame for IdleRelease; live background tasks defer it,
// at most MaxDeferral. The next delivery starts a new process with
// --resume.
package claudecode
