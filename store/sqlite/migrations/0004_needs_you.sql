-- vigil SQLite schema, version 4: what a person must act on in each
-- session (approvals, failed or blocked runs, spent budgets), so that a
-- list read from any process shows it. needs_you holds a JSON array of
-- one-line reasons, or '' when nobody needs to act; rows of earlier
-- versions start with ''.
ALTER TABLE sessions ADD COLUMN needs_you TEXT NOT NULL DEFAULT '';
