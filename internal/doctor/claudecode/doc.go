// Package claudecode finds, in the session files the Claude Code CLI
// writes, the failures of the seed reports: a stranded reply, a missed
// wake, a held queue item and a subagent left running. It reads the files
// and never writes them.
//
// # What it reads
//
// A projects directory (~/.claude/projects) holds one directory per working
// directory, and in it, per session:
//
//	<session-id>.jsonl                             the main agent's transcript
//	<session-id>/subagents/agent-<agent-id>.jsonl  one subagent's transcript
//	<session-id>/subagents/agent-<agent-id>.meta.json
//
// This is the layout CLI 2.1.328 writes (checked by running it in this
// package's tests). Each line is one JSON object; the checks read these
// kinds of line and nothing else:
//
//   - queue-operation enqueue / dequeue / remove (main file only): what was
//     queued for the main agent (an enqueue's content is a user prompt or a
//     whole <task-notification>), when a turn took it (dequeue, which has no
//     content and is followed by the user entry built from the item), and
//     items absorbed into a running turn (remove, same content);
//   - user entries: a dequeued item's text (matched to its enqueue by
//     content, or by task and tool-use id for notifications), tool results
//     (toolUseResult.status "async_launched" with agentId: a background
//     subagent), and in a subagent's file the entries with origin.kind
//     "coordinator" that start a follow-on run (a SendMessage to the
//     finished agent);
//   - assistant entries: stop_reason "end_turn" (or stop_sequence,
//     max_tokens, refusal) ends a turn, so the session is idle until the
//     next dequeue; tool_use blocks named SendMessage; a subagent's final
//     text is its run's reply;
//   - agent-<id>.meta.json: requestShape "background" marks a background
//     subagent.
//
// # The checks
//
// stranded-reply: a follow-on run of a subagent (started by a coordinator
// entry) ended with a reply, and no <task-notification> for that agent was
// enqueued in the main file for it. Each ended run of a background
// subagent needs one notification (enqueues only; in a file with no
// queue-operation lines at all, the user entries and queued_command
// attachments with origin task-notification). A notification is a run's
// when its <result> is the run's reply; else when its <tool-use-id> is the
// tool use that started the run (the Agent call, from the launch result or
// the meta file, for the first run; the SendMessage for a follow-on);
// else, latest run first, the first unclaimed one queued at or after the
// run started. A reply younger than Options.MissedWakeAfter is left alone
// (its notification may still come). The reply text is recovered from the
// subagent's transcript.
//
// stuck-subagent: the same, for a background subagent's first run: its
// transcript shows it finished, but no notification for it was ever
// enqueued, so the main agent still sees it running. (A background Bash
// task's end is written only to its output file outside the projects
// directory, so a Bash task never notified is not reported: the files do
// not prove it ended.)
//
// missed-wake: a task notification was enqueued while the main agent was
// idle (its last turn had ended), or during a turn that then ended without
// taking it, and the next dequeue came more than Options.MissedWakeAfter
// after the moment it became deliverable, or never came. The stall is that
// gap; a stall that ended with a user prompt is one the user ended by
// typing.
//
// held-continuation: an enqueued item was never dequeued nor removed, while
// an item enqueued after it was dequeued: the queue moved on without it.
// It is the queue item to cancel or resend.
//
// Lines that cannot be read (not JSON, NUL bytes, cut at the end of the
// file, longer than Options.MaxLine) become warnings; reading goes on.
package claudecode
